"""ReAct: the model thinks, calls tools, reads their results, and repeats until it answers."""

from __future__ import annotations

import json
import time

from core_agent.contracts.errors import ModelError, TurnLimitExceededError
from core_agent.contracts.executor import ExecutionContext, ExecutionOutcome, IExecutor
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    ToolDefinition,
)
from core_agent.contracts.tool import ToolContext
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.trace_store import ITraceStore
from core_agent.observability.tracer import Tracer
from core_agent.tooling.tool_runner import ToolRunner
from shared.agent_protocol import (
    LLMCompleted,
    LLMDelta,
    StrategyMode,
    ToolCall,
    ToolCompleted,
    ToolMessage,
    ToolStarted,
)


class ReActExecutor(IExecutor):
    """A reason-act loop over ``ILLMGateway`` and the tool registry, tracing every call."""

    def __init__(
        self,
        *,
        llm: ILLMGateway,
        tools: IToolRegistry,
        trace_store: ITraceStore,
        tool_timeout_s: float,
        temperature: float | None = None,
    ) -> None:
        self._llm = llm
        self._tools = tools
        self._runner = ToolRunner(tools, default_timeout_s=tool_timeout_s)
        self._trace_store = trace_store
        self._temperature = temperature

    @property
    def strategy(self) -> StrategyMode:
        """Always ``react``."""
        return "react"

    async def run(self, context: ExecutionContext) -> ExecutionOutcome:
        """Loop model turns and tool calls until the model answers without calling a tool."""
        tracer = Tracer(self._trace_store, trace_id=context.trace_id, task_id=context.task_id)
        allowed = (
            list(context.request.tools)
            if context.request.tools is not None
            else self._tools.names()
        )
        definitions = [
            ToolDefinition(spec.name, spec.description, spec.parameters)
            for spec in self._tools.specs(allowed)
        ]
        for turn in range(1, context.max_turns + 1):
            context.stats.turns = turn
            response = await self._call_model(context, tracer, definitions, turn)
            context.messages.append(response.message)
            if not response.message.tool_calls:
                return ExecutionOutcome(output=response.message.content or "")
            for call in response.message.tool_calls:
                await self._call_tool(context, tracer, call, allowed)
        raise TurnLimitExceededError(
            f"no final answer after {context.max_turns} turns "
            "(raise max_turns or simplify the task)"
        )

    async def _call_model(
        self,
        context: ExecutionContext,
        tracer: Tracer,
        definitions: list[ToolDefinition],
        turn: int,
    ) -> LLMResponse:
        request = LLMRequest(
            messages=tuple(context.messages), tools=definitions, temperature=self._temperature
        )
        started = time.perf_counter()
        async with tracer.span(
            "llm", self._llm.model_name, parent_span_id=context.parent_span_id
        ) as span:
            span.attributes["turn"] = turn
            response: LLMResponse | None = None
            async for item in self._llm.stream(request):
                if isinstance(item, LLMTextDelta):
                    await context.emit(LLMDelta, text=item.text)
                else:
                    response = item
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

    async def _call_tool(
        self, context: ExecutionContext, tracer: Tracer, call: ToolCall, allowed: list[str]
    ) -> None:
        await context.emit(ToolStarted, tool_call=call)
        started = time.perf_counter()
        async with tracer.span("tool", call.name, parent_span_id=context.parent_span_id) as span:
            span.attributes["call_id"] = call.id
            span.attributes["arguments"] = (
                json.dumps(call.arguments) if call.arguments is not None else call.raw_arguments
            )
            result = await self._runner.run(
                call,
                ToolContext(
                    task_id=context.task_id, session_id=context.session_id, call_id=call.id
                ),
                allowed=allowed,
            )
            if result.is_error:
                span.error = result.content
                span.attributes["error_type"] = result.error_type
        context.stats.tool_calls += 1
        context.messages.append(
            ToolMessage(
                tool_call_id=call.id,
                name=call.name,
                content=result.content,
                is_error=result.is_error,
            )
        )
        await context.emit(
            ToolCompleted, result=result, latency_ms=(time.perf_counter() - started) * 1000.0
        )
