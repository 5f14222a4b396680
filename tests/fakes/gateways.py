"""A gateway double that records every request before delegating."""

from __future__ import annotations

from collections.abc import AsyncIterator

from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMStreamItem


class FakeRecordingGateway(ILLMGateway):
    def __init__(self, inner: ILLMGateway) -> None:
        self.inner = inner
        self.requests: list[LLMRequest] = []

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        return await self.inner.complete(request)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        self.requests.append(request)
        async for item in self.inner.stream(request):
            yield item
