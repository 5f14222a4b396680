"""Token counts for answers whose server reported none.

Usage limits, session budgets, cost and the trace all read a call's token counts. Some
OpenAI-compatible servers send no usage at all (older llama.cpp and LM Studio builds, proxies
that drop the streamed usage chunk), and a gateway can then only say 0: a task against such a
server would never reach a token limit, however much it sent. ``EstimatedUsageGateway`` wraps
the kernel's gateway and, for an answer that reports neither input nor output tokens, counts
them offline with the configured ``ITokenCounter`` (the prompt's messages and tool
definitions; the answer's text and tool calls), and marks the response ``usage_estimated``
(the ``llm`` span says so). A reported count, even a small one, is always kept as it is.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
)
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.memory.prompt_window import tool_definitions_text
from core_agent.orchestration.gateway_wrapper import GatewayWrapper


class EstimatedUsageGateway(GatewayWrapper):
    """``inner``, with the token counts of answers that came without any estimated."""

    def __init__(self, inner: ILLMGateway, counter: Callable[[], ITokenCounter]) -> None:
        super().__init__(inner)
        self._counter = counter

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The inner gateway's answer, with estimated counts when it reported none."""
        return self._counted(request, await self.inner.complete(request))

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """The inner gateway's stream; its final response counted as ``complete``'s."""
        async for item in self.inner.stream(request):
            yield self._counted(request, item) if isinstance(item, LLMResponse) else item

    def _counted(self, request: LLMRequest, response: LLMResponse) -> LLMResponse:
        usage = response.usage
        if usage.input_tokens or usage.output_tokens:
            return response
        counter = self._counter()
        prompt = counter.count_messages(request.messages)
        if request.tools:
            prompt += counter.count_text(tool_definitions_text(request.tools))
        message = response.message
        answer = counter.count_text((message.reasoning or "") + (message.content or ""))
        for call in message.tool_calls:
            arguments = call.raw_arguments or json.dumps(call.arguments, ensure_ascii=False)
            answer += counter.count_text(call.name) + counter.count_text(arguments)
        return replace(
            response,
            usage=usage.model_copy(update={"input_tokens": prompt, "output_tokens": answer}),
            usage_estimated=True,
        )
