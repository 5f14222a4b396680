"""The kernel's spans as OpenTelemetry spans that follow the GenAI semantic conventions.

Each span keeps its ids (a 128-bit trace id and 64-bit span ids, already OpenTelemetry's
format), its parent, times and status, so the trace a collector shows is the one
``core-agent trace`` prints. What the conventions name is given their names:

* ``task``: ``invoke_agent`` (``gen_ai.agent.name``, the task's tokens);
* ``llm``: ``chat``, a client span: ``gen_ai.provider.name`` (and the older
  ``gen_ai.system``), ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``;
* ``tool``: ``execute_tool``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.type``, ``gen_ai.tool.call.arguments`` (as recorded: redacted, capped);
* ``retrieval``: ``retrieval``; ``memory.recall``: ``search_memory``; the plan: ``plan``;
* a failed span: status ``ERROR`` and ``error.type`` (the exception's class name).

Everything else the kernel recorded is kept under ``core_agent.*`` (``core_agent.span.kind``,
``core_agent.task.id``, ``core_agent.cost_usd``, each attribute by its own name), as a plain
value or, for nested data, JSON text. Spans of kinds the conventions do not know (policy,
approval, a plan step, a model call's attempts) are internal spans with those attributes.

Operation names and attribute keys come from ``opentelemetry-semantic-conventions`` where it
has them (``retrieval``, ``plan`` and ``search_memory`` are in later versions of the
conventions than the oldest package this works with).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from core_agent.contracts.trace_store import Span

AGENT_NAME = "core-agent"
"""``gen_ai.agent.name`` of a task's span."""

OPERATION = gen_ai.GenAiOperationNameValues
PLAN_OPERATION = "plan"
RETRIEVAL_OPERATION = "retrieval"
SEARCH_MEMORY_OPERATION = "search_memory"

PROVIDERS: Mapping[str, str] = {
    "openai": gen_ai.GenAiProviderNameValues.OPENAI.value,
    "text-completion-openai": gen_ai.GenAiProviderNameValues.OPENAI.value,
    "azure": gen_ai.GenAiProviderNameValues.AZURE_AI_OPENAI.value,
    "azure_ai": gen_ai.GenAiProviderNameValues.AZURE_AI_INFERENCE.value,
    "anthropic": gen_ai.GenAiProviderNameValues.ANTHROPIC.value,
    "bedrock": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "vertex_ai": gen_ai.GenAiProviderNameValues.GCP_VERTEX_AI.value,
    "gemini": gen_ai.GenAiProviderNameValues.GCP_GEMINI.value,
    "cohere": gen_ai.GenAiProviderNameValues.COHERE.value,
    "cohere_chat": gen_ai.GenAiProviderNameValues.COHERE.value,
    "mistral": gen_ai.GenAiProviderNameValues.MISTRAL_AI.value,
    "groq": gen_ai.GenAiProviderNameValues.GROQ.value,
    "deepseek": gen_ai.GenAiProviderNameValues.DEEPSEEK.value,
    "xai": gen_ai.GenAiProviderNameValues.X_AI.value,
    "perplexity": gen_ai.GenAiProviderNameValues.PERPLEXITY.value,
    "watsonx": gen_ai.GenAiProviderNameValues.IBM_WATSONX_AI.value,
}
"""litellm's provider prefixes and the conventions' names for them; any other prefix
(``ollama``, ``scripted``...) is used as it is."""

_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_STATUS_CHARS = 1000


def readable_span(span: Span, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """``span`` as a finished OpenTelemetry span, ready for an SDK exporter."""
    trace_id = otel_id(span.trace_id, bits=128)
    parent = (
        SpanContext(trace_id, otel_id(span.parent_span_id, bits=64), is_remote=False)
        if span.parent_span_id
        else None
    )
    name, kind, attributes = _describe(span)
    status = (
        Status(StatusCode.ERROR, (span.error or "")[:_MAX_STATUS_CHARS])
        if span.status == "error"
        else Status(StatusCode.UNSET)
    )
    # Built directly rather than through a tracer: the span ended long ago, with ids of its own.
    return ReadableSpan(
        name=name,
        context=SpanContext(
            trace_id,
            otel_id(span.span_id, bits=64),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        ),
        parent=parent,
        resource=resource,
        attributes=attributes,
        kind=kind,
        status=status,
        start_time=nanoseconds(span.started_at),
        end_time=nanoseconds(span.ended_at),
        instrumentation_scope=scope,
    )


def otel_id(text: str, *, bits: int) -> int:
    """The id in hex as OpenTelemetry's integer; another spelling is hashed to one, stably."""
    if len(text) == bits // 4:
        try:
            value = int(text, 16)
        except ValueError:
            pass
        else:
            if value:
                return value
    digest = hashlib.sha256(text.encode("utf-8")).digest()[: bits // 8]
    return int.from_bytes(digest, "big") or 1


def nanoseconds(moment: datetime) -> int:
    """Nanoseconds since the Unix epoch (a naive time is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return ((moment - _EPOCH) // timedelta(microseconds=1)) * 1000


def provider_and_model(model: str) -> tuple[str, str]:
    """``gen_ai.provider.name`` and the model's own name, from a litellm model string."""
    prefix, slash, name = model.partition("/")
    if not slash:
        return "unknown", model
    return PROVIDERS.get(prefix, prefix), name


def _describe(span: Span) -> tuple[str, SpanKind, dict[str, AttributeValue]]:
    """The span's OpenTelemetry name, kind and attributes."""
    own = dict(span.attributes)
    attributes: dict[str, AttributeValue] = {
        "core_agent.span.kind": span.kind,
        "core_agent.span.name": span.name,
        "core_agent.task.id": span.task_id,
    }
    if span.cost_usd is not None:
        attributes["core_agent.cost_usd"] = span.cost_usd
    if isinstance(session := own.pop("session_id", None), str) and session:
        # A session is a conversation: every turn's spans share it, as the conventions ask.
        attributes[gen_ai.GEN_AI_CONVERSATION_ID] = session
    if span.status == "error":
        attributes[ERROR_TYPE] = _error_type(span.error)
    name, kind = span.name, SpanKind.INTERNAL
    usage = False
    if span.kind == "task":
        name, usage = f"{OPERATION.INVOKE_AGENT.value} {AGENT_NAME}", True
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = OPERATION.INVOKE_AGENT.value
        attributes[gen_ai.GEN_AI_AGENT_NAME] = AGENT_NAME
    elif span.kind == "llm":
        name, kind, usage = _chat(span, own, attributes), SpanKind.CLIENT, True
    elif span.kind == "tool":
        name = f"{OPERATION.EXECUTE_TOOL.value} {span.name}"
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = OPERATION.EXECUTE_TOOL.value
        attributes[gen_ai.GEN_AI_TOOL_NAME] = span.name
        attributes[gen_ai.GEN_AI_TOOL_TYPE] = "function"
        if (call_id := own.pop("call_id", None)) is not None:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = str(call_id)
        if (arguments := own.pop("arguments", None)) is not None:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(arguments)
    elif span.kind == "retrieval":
        name = f"{RETRIEVAL_OPERATION} {span.name}"
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = RETRIEVAL_OPERATION
    elif span.kind == "memory" and span.name == "memory.recall":
        name = f"{SEARCH_MEMORY_OPERATION} {span.name}"
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = SEARCH_MEMORY_OPERATION
    elif span.kind == "planning" and span.name == "plan":
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = PLAN_OPERATION
    elif span.kind == "llm_attempt" and isinstance(own.get("model"), str):
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = provider_and_model(own["model"])[1]
    if usage:
        if span.tokens_in is not None:
            attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = span.tokens_in
        if span.tokens_out is not None:
            attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = span.tokens_out
    else:
        if span.tokens_in is not None:
            attributes["core_agent.tokens_in"] = span.tokens_in
        if span.tokens_out is not None:
            attributes["core_agent.tokens_out"] = span.tokens_out
    for key, value in own.items():
        converted = attribute_value(value)
        if converted is not None:
            attributes.setdefault(f"core_agent.{key}", converted)
    return name, kind, attributes


def _chat(span: Span, own: dict[str, Any], attributes: dict[str, AttributeValue]) -> str:
    """Fill in a model call's attributes; returns the span's name (``chat <model>``)."""
    provider, requested = provider_and_model(span.name)
    answered = own.get("response_model") or own.get("fallback_model")
    attributes[gen_ai.GEN_AI_OPERATION_NAME] = OPERATION.CHAT.value
    attributes[gen_ai.GEN_AI_PROVIDER_NAME] = provider
    # The name before the conventions' 1.37 (backends not yet reading the new one show it).
    attributes[gen_ai.GEN_AI_SYSTEM] = provider
    attributes[gen_ai.GEN_AI_REQUEST_MODEL] = requested
    attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = (
        provider_and_model(answered)[1] if isinstance(answered, str) and answered else requested
    )
    finish = own.pop("finish_reason", None)
    if isinstance(finish, str) and finish:
        attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = (finish,)
    return f"{OPERATION.CHAT.value} {requested}"


def _error_type(error: str | None) -> str:
    """The exception's class name in ``"TypeName: message"``, else the conventions' ``_OTHER``."""
    head = (error or "").split(":", 1)[0].strip()
    return head if _IDENTIFIER.fullmatch(head) else "_OTHER"


def attribute_value(value: Any) -> AttributeValue | None:
    """A value OpenTelemetry takes as it is, or JSON text; ``None`` for an absent one."""
    if value is None:
        return None
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and value:
        for kind in (str, bool, int, float):
            # bool is an int: a list of bools is matched before ints, and ints never hold one.
            if all(type(item) is kind for item in value):
                return tuple(value)
    return _json(value)


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
