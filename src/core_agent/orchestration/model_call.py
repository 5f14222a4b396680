"""One traced model call: a span with tokens and cost, stats, and the events it causes."""

from __future__ import annotations

import time
from typing import Any

from core_agent.contracts.errors import ModelError
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMTextDelta
from core_agent.observability.tracer import Tracer
from shared.agent_protocol import LLMCompleted, LLMDelta


async def traced_model_call(
    llm: ILLMGateway,
    request: LLMRequest,
    context: ExecutionContext,
    tracer: Tracer,
    *,
    parent_span_id: str | None,
    stream: bool,
    attributes: dict[str, Any],
) -> LLMResponse:
    """Call the model inside an ``llm`` span; count usage; publish deltas and completion.

    With ``stream`` the text is published as ``llm.delta`` events while it arrives.

    Raises:
        ModelError: The call failed (the span records the error).
    """
    started = time.perf_counter()
    async with tracer.span("llm", llm.model_name, parent_span_id=parent_span_id) as span:
        span.attributes.update(attributes)
        response: LLMResponse | None = None
        if stream:
            async for item in llm.stream(request):
                if isinstance(item, LLMTextDelta):
                    await context.emit(LLMDelta, text=item.text)
                else:
                    response = item
        else:
            response = await llm.complete(request)
        if response is None:
            raise ModelError("the model's stream ended without a final response")
        span.tokens_in = response.usage.input_tokens
        span.tokens_out = response.usage.output_tokens
        span.cost_usd = response.usage.cost_usd
        span.attributes["finish_reason"] = response.finish_reason
        span.attributes["tool_calls"] = [call.name for call in response.message.tool_calls]
    context.stats.llm_calls += 1
    context.stats.usage = context.stats.usage + response.usage
    await context.emit(
        LLMCompleted,
        model=response.model,
        message=response.message,
        usage=response.usage,
        latency_ms=(time.perf_counter() - started) * 1000.0,
    )
    return response
