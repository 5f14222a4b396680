"""A gateway double that records every request before delegating."""

from __future__ import annotations

from collections.abc import AsyncIterator

from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMStreamItem
from shared.agent_protocol import AssistantMessage, TokenUsage


class FakeRecordingGateway(ILLMGateway):
    def __init__(self, inner: ILLMGateway, *, context_window: int | None = None) -> None:
        self.inner = inner
        self.requests: list[LLMRequest] = []
        self.window = context_window

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def context_window(self) -> int | None:
        return self.window if self.window is not None else self.inner.context_window()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        self.requests.append(request)
        async for item in self.inner.stream(request):
            yield item


class FakeSequentialGateway(ILLMGateway):
    """Answers call *n* with reply *n*, whatever the request holds (unlike the scripted
    gateway, which counts the assistant turns in the request and so needs all of them)."""

    def __init__(self, replies: list[AssistantMessage]) -> None:
        self.replies = list(replies)
        self.calls = 0

    @property
    def model_name(self) -> str:
        return "fake/sequential"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        reply = self.replies[self.calls]
        self.calls += 1
        return LLMResponse(message=reply, usage=TokenUsage(), model=self.model_name)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        yield await self.complete(request)
