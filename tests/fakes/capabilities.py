"""A business capability double: it offers what it is given and records what it is asked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from core_agent.contracts.business_capability_provider import (
    CapabilityDocument,
    IBusinessCapabilityProvider,
)
from core_agent.contracts.tool import ITool
from shared.agent_protocol import TaskRequest


class FakeCapability(IBusinessCapabilityProvider):
    def __init__(
        self,
        name: str = "fake",
        *,
        instructions: str = "",
        rules: str = "",
        context: str | BaseException | None = None,
        tools: Sequence[ITool] = (),
        installed: Sequence[str] = (),
        documents: Sequence[CapabilityDocument] = (),
    ) -> None:
        self._name = name
        self._instructions = instructions
        self._rules = rules
        self._context = context
        self._tools = list(tools)
        self._installed = list(installed)
        self.offered = list(documents)
        self.asked: list[TaskRequest] = []
        self.closed = False

    @property
    def name(self) -> str:
        return self._name

    def tools(self) -> list[ITool]:
        return list(self._tools)

    def installed_tools(self) -> list[str]:
        return list(self._installed)

    def system_instructions(self) -> str:
        return self._instructions

    def policy_rules(self) -> str:
        return self._rules

    async def context(self, request: TaskRequest) -> str | None:
        self.asked.append(request)
        if isinstance(self._context, BaseException):
            raise self._context
        return self._context

    async def documents(self) -> AsyncIterator[CapabilityDocument]:
        for document in self.offered:
            yield document

    async def close(self) -> None:
        self.closed = True
