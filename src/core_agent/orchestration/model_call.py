"""One traced model call: a span with tokens and cost, stats, and the events it causes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core_agent.contracts.errors import ModelError, RunStoppedError
from core_agent.contracts.executor import ExecutionContext
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest, LLMResponse, LLMTextDelta
from core_agent.observability.span_content import message_record, messages_record, tool_name
from core_agent.observability.tracer import OpenSpan, Tracer, usage_attributes
from core_agent.orchestration.distinct_call_ids import with_distinct_call_ids
from core_agent.orchestration.model_attempts import ModelAttempt, observe_attempts
from core_agent.orchestration.usage_limits import check_after_model_call, check_before_model_call
from shared.agent_protocol import ChatMessage, LLMCompleted, LLMDelta, LLMFailed, TokenUsage


class _AttemptSpans:
    """Writes each try of the call as an ``llm_attempt`` span under the call's ``llm`` span.

    Unless the call had just one try: then the ``llm`` span is that try's record, and a child
    would only repeat it (most calls are that, and their traces stay as small as they were).
    """

    def __init__(self, tracer: Tracer, parent_span_id: str) -> None:
        self._tracer = tracer
        self._parent = parent_span_id
        self.attempts: list[ModelAttempt] = []

    @property
    def current(self) -> int:
        """The number of the try under way (tries end before the next one starts)."""
        return len(self.attempts) + 1

    async def __call__(self, attempt: ModelAttempt) -> None:
        self.attempts.append(attempt)
        if attempt.number == 1 and attempt.outcome in ("ok", "failed"):
            return
        attributes: dict[str, Any] = {
            "attempt": attempt.number,
            "model": attempt.model,
            "outcome": attempt.outcome,
        }
        for name in ("status_code", "retry_after_s", "wait_s"):
            value = getattr(attempt, name)
            if value is not None:
                attributes[name] = value
        await self._tracer.record(
            "llm_attempt",
            f"{attempt.model} #{attempt.number}",
            started_at=attempt.started_at,
            ended_at=attempt.ended_at,
            parent_span_id=self._parent,
            attributes=attributes,
            error=attempt.error,
        )


async def traced_model_call(
    llm: ILLMGateway,
    request: LLMRequest,
    context: ExecutionContext,
    tracer: Tracer,
    *,
    parent_span_id: str | None,
    stream: bool,
    attributes: dict[str, Any],
    new_messages: Sequence[ChatMessage] | None = None,
    new_from: int = 0,
) -> LLMResponse:
    """Call the model inside an ``llm`` span; count usage; publish deltas and completion.

    With ``stream`` the text is published as ``llm.delta`` events while it arrives. When the
    gateway reports its tries (``ResilientGateway`` does), the ``llm`` span counts them in its
    ``attempts`` attribute and names the ``fallback_model`` when another model than the
    primary answered; when there was more than one, each is an ``llm_attempt`` child span with
    its error, status code and the wait that followed.

    With content recording on, the span holds the answer (``output_message``) and the
    prompt's messages (``input_messages``): all of them, or, for a conversation whose earlier
    calls recorded theirs, only ``new_messages``, the ones added since (from position
    ``new_from`` of the conversation), so a long conversation is not written again at every
    call.

    The task's usage limits are checked before the call and once its usage is counted
    (``usage_limits``). Tries whose answer could not be used count too: in the answer's
    usage (``ResilientGateway``), or, when the call fails, in the run's (``ModelError.usage``).

    Raises:
        ModelError: The call failed (the span records the error, an ``llm.failed`` event
            the failure).
        UsageLimitExceededError: The call would pass a usage limit (it is not made), or it
            did (its usage is counted and its events published first).
    """
    check_before_model_call(context)
    started = time.perf_counter()
    async with tracer.span("llm", llm.model_name, parent_span_id=parent_span_id) as span:
        span.attributes.update(attributes)
        span.attributes["messages_sent"] = len(request.messages)
        if tracer.content:
            recorded = request.messages if new_messages is None else new_messages
            span.attributes["input_messages"] = messages_record(tracer, recorded)
            span.attributes["input_messages_from"] = 0 if new_messages is None else new_from
        tries = _AttemptSpans(tracer, span.span_id)
        response: LLMResponse | None = None
        try:
            with observe_attempts(tries):
                if stream:
                    async for item in llm.stream(request):
                        if isinstance(item, LLMTextDelta):
                            await context.emit(LLMDelta, text=item.text, attempt=tries.current)
                        else:
                            response = item
                else:
                    response = await llm.complete(request)
        except ModelError as exc:
            if exc.usage is not None:  # answers that could not be used were still paid for
                _count_on_span(span, exc.usage)
                context.run.stats.usage = context.run.stats.usage + exc.usage
            if not isinstance(exc, RunStoppedError):  # the run's end, not the model's answer
                # Recorded like an answer: a rerun gives the same call the same failure.
                await context.emit(
                    LLMFailed,
                    model=llm.model_name,
                    error_type=type(exc).__name__,
                    error=str(exc),
                    status_code=exc.status_code,
                    latency_ms=(time.perf_counter() - started) * 1000.0,
                )
            raise
        finally:
            if tries.attempts:
                span.attributes["attempts"] = len(tries.attempts)
        if response is None:
            raise ModelError("the model's stream ended without a final response")
        response = with_distinct_call_ids(response)
        usage = response.paid_usage
        if response.retried_usage is not None:
            span.attributes["retried_input_tokens"] = response.retried_usage.input_tokens
            span.attributes["retried_output_tokens"] = response.retried_usage.output_tokens
        _count_on_span(span, usage)
        if response.usage_estimated:
            span.attributes["usage_estimated"] = True
        span.attributes["finish_reason"] = response.finish_reason
        offered = {tool.name for tool in request.tools}
        span.attributes["tool_calls"] = [
            tool_name(tracer, call.name, offered) for call in response.message.tool_calls
        ]
        if tracer.content:
            span.attributes["output_message"] = message_record(tracer, response.message)
        answered = tries.attempts[-1].model if tries.attempts else llm.model_name
        if answered != llm.model_name:
            span.attributes["fallback_model"] = answered
    context.run.stats.llm_calls += 1
    context.run.stats.usage = context.run.stats.usage + usage
    # The size of this answer's prompt, not of every try's: the next prompt builds on it.
    context.run.stats.last_input_tokens = response.usage.input_tokens
    await context.emit(
        LLMCompleted,
        model=response.model,
        message=response.message,
        usage=usage,
        latency_ms=(time.perf_counter() - started) * 1000.0,
        finish_reason=response.finish_reason,
        reasoning_opened_in_prompt=response.reasoning_opened_in_prompt,
    )
    check_after_model_call(context)
    return response


def _count_on_span(span: OpenSpan, usage: TokenUsage) -> None:
    """Put a call's tokens and cost on its ``llm`` span."""
    span.tokens_in = usage.input_tokens
    span.tokens_out = usage.output_tokens
    span.cost_usd = usage.cost_usd
    span.attributes.update(usage_attributes(usage))
