"""The composition root: settings in, a wired kernel out.

Adapters are found by name through entry points (``core_agent.llm_gateways``,
``core_agent.task_stores``, ``core_agent.trace_stores``, ``core_agent.tools``), so the kernel never
imports a provider and a third-party package adds one by declaring an entry point. An entry
point names a factory taking ``AgentSettings``, or an object that already implements the port
(such as an ``@tool`` function). Tests swap any adapter with ``container.<name>.override(fake)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal, TypeVar

from dependency_injector import containers, providers

from core_agent.agent_files import AgentDefinition, load_agent_file
from core_agent.contracts.approval_gateway import ApprovalCallback
from core_agent.contracts.business_capability_provider import IBusinessCapabilityProvider
from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.document_catalog import IDocumentCatalog
from core_agent.contracts.document_loader import IDocumentLoader
from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.errors import (
    ConfigurationError,
    CoreAgentError,
    ExtraNotInstalledError,
    ProviderNotFoundError,
)
from core_agent.contracts.lexical_index import ILexicalIndex
from core_agent.contracts.llm_gateway import ILLMGateway
from core_agent.contracts.memory_store import IMemoryStore
from core_agent.contracts.policy_engine import IPolicyEngine
from core_agent.contracts.retriever import IRetriever
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.shell_parser import IShellParser
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.text_cuts import SecretSpans
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.contracts.tool import ITool
from core_agent.contracts.tool_call_ledger import IToolCallLedger
from core_agent.contracts.tool_hook import ToolHook
from core_agent.contracts.tool_sandbox import IToolSandbox
from core_agent.contracts.trace_store import ITraceStore, TraceRecording
from core_agent.contracts.vector_store import IVectorStore
from core_agent.kernel.agent_kernel import AgentKernel, Closable
from core_agent.kernel.event_bus import InProcessEventBus
from core_agent.kernel.session_conversations import SessionConversations
from core_agent.kernel.sync_kernel import Dispatch, HostApprover, SyncKernel
from core_agent.memory.chunking import TokenChunker
from core_agent.memory.hybrid_retriever import FusionWeights, HybridRetriever
from core_agent.memory.ingestion import IngestionPipeline
from core_agent.memory.prompt_window import PromptWindow
from core_agent.memory.semantic_memory import SemanticMemory
from core_agent.memory.vector_migration import DualWriteVectorStore
from core_agent.observability.recording_store import RecordingTraceStore
from core_agent.observability.span_export import ExportingTraceStore, SpanExportQueue
from core_agent.observability.traced_retrieval import TracedRetriever
from core_agent.orchestration.circuit_breaker import BreakerSettings
from core_agent.orchestration.estimated_usage import EstimatedUsageGateway
from core_agent.orchestration.inline_reasoning import InlineReasoningGateway
from core_agent.orchestration.model_classifier import ModelAssistedClassifier
from core_agent.orchestration.model_retry import RetryPolicy
from core_agent.orchestration.plan_execute_executor import (
    PlanExecuteExecutor,
    PlanExecuteLimits,
)
from core_agent.orchestration.planner import LLMPlanner
from core_agent.orchestration.react_executor import ReActExecutor
from core_agent.orchestration.react_loop import ReActLimits, ReActLoop
from core_agent.orchestration.resilient_gateway import ResilientGateway
from core_agent.orchestration.strategy_router import AdaptiveStrategyRouter, RoutingThresholds
from core_agent.orchestration.task_classifier import TaskClassifier
from core_agent.orchestration.tool_gate import ToolCallGate
from core_agent.prompts import PromptSet, load_prompt_set
from core_agent.safety.approvals import ApprovalGrants
from core_agent.safety.policy_engine import PolicyRule, RulePolicyEngine, capability_rules
from core_agent.safety.redacting_stores import (
    RedactingCheckpointStore,
    RedactingMemoryStore,
    RedactingTaskStore,
    RedactingToolCallLedger,
    RedactingTraceStore,
)
from core_agent.safety.redaction import Redactor, host_secrets
from core_agent.safety.tool_poisoning import poisoned_tool_reason
from core_agent.tooling.discovered_tool_selection import (
    DiscoveredToolSelection,
    split_tool_list,
)
from core_agent.tooling.memory_tools import knowledge_search_tool, memory_tools
from core_agent.tooling.registry import ToolRegistry
from core_agent.tooling.tool_origins import check_deps, defined_at, host_tools, registry_of
from core_agent.workflows.workflow_runs import build_workflow_executor, kernel_with_workflows

log = logging.getLogger(__name__)

LLM_GATEWAYS = "core_agent.llm_gateways"
TASK_STORES = "core_agent.task_stores"
TRACE_STORES = "core_agent.trace_stores"
CHECKPOINT_STORES = "core_agent.checkpoint_stores"
TOOL_CALL_LEDGERS = "core_agent.tool_call_ledgers"
SANDBOXES = "core_agent.sandboxes"
SHELL_PARSERS = "core_agent.shell_parsers"
TOOLS = "core_agent.tools"
EMBEDDERS = "core_agent.embedders"
VECTOR_STORES = "core_agent.vector_stores"
LEXICAL_INDEXES = "core_agent.lexical_indexes"
TOKEN_COUNTERS = "core_agent.token_counters"
MEMORY_STORES = "core_agent.memory_stores"
DOCUMENT_CATALOGS = "core_agent.document_catalogs"
DOCUMENT_LOADERS = "core_agent.document_loaders"
CAPABILITIES = "core_agent.capabilities"
SPAN_EXPORTERS = "core_agent.span_exporters"
SHIPPED_VECTOR_STORES = ("sqlite_vec", "lancedb")
MCP_CAPABILITY = "mcp"
"""The capability that serves the tools of declared MCP servers (``providers.mcp``)."""
ENTRY_POINT_GROUPS = (
    LLM_GATEWAYS, TASK_STORES, TRACE_STORES, CHECKPOINT_STORES, TOOL_CALL_LEDGERS, SANDBOXES,
    SHELL_PARSERS, TOOLS, EMBEDDERS, VECTOR_STORES, LEXICAL_INDEXES, TOKEN_COUNTERS,
    MEMORY_STORES, DOCUMENT_CATALOGS, DOCUMENT_LOADERS, CAPABILITIES, SPAN_EXPORTERS,
)  # fmt: skip
"""Every entry-point group the container reads (``core-agent plugins`` lists them)."""

T = TypeVar("T")


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def installed_providers(group: str) -> list[str]:
    """Names registered in an entry-point group, sorted."""
    return sorted(_entry_points(group))


def describe_entry_point(entry: EntryPoint) -> str:
    """``'name' (module:attr, from distribution D)``, for messages."""
    source = f", from {entry.dist.name}" if entry.dist is not None else ""
    return f"{entry.name!r} ({entry.value}{source})"


def load_provider(group: str, name: str, settings: AgentSettings, port: type[T]) -> T:
    """The provider registered as ``name`` in ``group``, checked to implement ``port``.

    The entry point names either an object that already implements ``port`` (an ``@tool``
    function, a ready instance), used as it is, or a factory called with ``settings``.

    Raises:
        ProviderNotFoundError: No such name; the error lists the installed ones.
        ConfigurationError: The entry point names something else, or the factory returned
            something else than a ``port``. Another exception of the factory propagates, with
            a note naming the entry point.
    """
    available = _entry_points(group)
    if name not in available:
        raise ProviderNotFoundError(group, name, list(available))
    entry = available[name]
    loaded = entry.load()
    if isinstance(loaded, port):
        return loaded
    if not callable(loaded):
        raise ConfigurationError(
            f"entry point {describe_entry_point(entry)} in {group!r} is a "
            f"{type(loaded).__name__}: it must name a factory taking AgentSettings or an "
            f"object that implements {port.__name__}"
        )
    try:
        instance = loaded(settings)
    except CoreAgentError:
        raise  # the kernel's own errors already say what to fix
    except Exception as exc:
        exc.add_note(
            f"while building {describe_entry_point(entry)} of {group!r} from the settings (an "
            f"entry point names a factory taking AgentSettings, or an object that implements "
            f"{port.__name__} such as an @tool function)"
        )
        raise
    if not isinstance(instance, port):
        raise ConfigurationError(
            f"provider {name!r} in {group!r} returned {type(instance).__name__}, "
            f"not a {port.__name__}"
        )
    return instance


def tool_choice(settings: AgentSettings) -> tuple[list[str] | None, DiscoveredToolSelection | None]:
    """``settings.tools`` split: the names to find now, and its choice of MCP servers' tools.

    Names of declared MCP servers' tools (``<server>__<tool>``, ``<server>__*``) are checked
    only once the servers are asked (``discovered_tool_selection``). ``(None, None)`` when
    ``settings.tools`` is unset.

    Raises:
        ConfigurationError: ``AGENT_MCP_FILE`` cannot be read (see ``mcp_server_tables``).
    """
    if settings.tools is None:
        return None, None
    servers = settings.mcp_server_tables() if settings.mcp_servers or settings.mcp_file else {}
    return split_tool_list(settings.tools, servers)


def load_tools(
    settings: AgentSettings,
    kernel_tools: Sequence[ITool] = (),
    code_tools: Sequence[ITool] = (),
    chosen_names: Sequence[str] | None = None,
) -> ToolRegistry:
    """A registry with the host's tools, the installed tools and the kernel's own tools.

    ``settings.tools`` picks among the installed and the kernel's own (all when unset); the
    kernel's own are memory and knowledge search. ``code_tools``, the tools the host passed
    to ``create_kernel``, are always in (``settings.tools`` may name them too).
    ``chosen_names``: ``settings.tools`` without the MCP servers' tools it names
    (``tool_choice``), which join later; taken from ``settings.tools`` when not given.

    Raises:
        ProviderNotFoundError: ``settings.tools`` names a tool that is none of these.
        ConfigurationError: Two tools have the same name (the message says where each is from).
    """
    available = _entry_points(TOOLS)
    own = {tool.spec.name: tool for tool in kernel_tools}
    given = {tool.spec.name for tool in code_tools}
    if chosen_names is None:
        chosen_names = settings.tools
    wanted = [*available, *own] if chosen_names is None else chosen_names
    chosen = [(tool, f"the tool {defined_at(tool)} passed to create_kernel") for tool in code_tools]
    for name in dict.fromkeys(wanted):
        if name in available:
            tool = load_provider(TOOLS, name, settings, ITool)  # type: ignore[type-abstract]
            chosen.append((tool, f"the installed tool {describe_entry_point(available[name])}"))
        if name in own:
            chosen.append((own[name], "the kernel's own tool"))
        if name not in available and name not in own and name not in given:
            raise ProviderNotFoundError(TOOLS, name, [*available, *own, *given])
    return registry_of(chosen)


def load_capabilities(settings: AgentSettings) -> list[IBusinessCapabilityProvider]:
    """The business capabilities ``AGENT_CAPABILITIES`` names, in its order.

    Then ``mcp`` when MCP servers are declared (``AGENT_MCP_SERVERS``, ``AGENT_MCP_FILE``).

    Raises:
        ProviderNotFoundError: A name is not installed; the error lists the installed ones.
    """
    names = list(settings.capabilities)
    if (settings.mcp_servers or settings.mcp_file) and MCP_CAPABILITY not in names:
        names.append(MCP_CAPABILITY)  # declaring MCP servers is enough to use them
    return [
        load_provider(CAPABILITIES, name, settings, IBusinessCapabilityProvider)  # type: ignore[type-abstract]
        for name in names
    ]


def add_capability_tools(
    registry: ToolRegistry,
    settings: AgentSettings,
    capabilities: Sequence[IBusinessCapabilityProvider],
    selection: DiscoveredToolSelection | None = None,
) -> ToolRegistry:
    """``registry`` with each capability's own tools and the installed tools it names.

    The tools a capability discovers (``discovered_tools``) join when tools are first listed:
    all of them, or those ``selection`` chooses (``tool_choice``).

    Raises:
        ProviderNotFoundError: A capability names a tool that is not installed.
        ToolRegistrationError: A capability's tool has the name of another tool.
    """
    for capability in capabilities:
        for name in capability.installed_tools():
            if name not in registry.names():
                registry.register(load_provider(TOOLS, name, settings, ITool))  # type: ignore[type-abstract]
        for tool in capability.tools():
            registry.register(tool)
        discover = capability.discovered_tools
        if selection is not None:
            discover = selection.picking(discover)
        registry.defer(discover, screen=poisoned_tool_reason)
    return registry


def capability_policy(
    capabilities: Sequence[IBusinessCapabilityProvider], also: Sequence[PolicyRule] = ()
) -> list[PolicyRule]:
    """``also`` and the policy rules of every capability, which can only make calls safer.

    Raises:
        ConfigurationError: A capability's rules are malformed or open the network.
    """
    return [
        *also,
        *(
            rule
            for capability in capabilities
            for rule in capability_rules(capability.name, capability.policy_rules())
        ),
    ]


def build_kernel_tools(
    settings: AgentSettings, memory: Callable[[], IMemoryStore], retriever: Callable[[], IRetriever]
) -> list[ITool]:
    """``remember``, ``recall``, ``forget`` and ``knowledge_search``.

    Their stores are opened on the first call, not when the tools are listed.
    """
    return [
        *memory_tools(memory, namespace=settings.memory_namespace),
        knowledge_search_tool(retriever, namespace=settings.knowledge_namespace),
    ]


def build_vector_store(settings: AgentSettings) -> IVectorStore:
    """The configured vector store, wrapped for dual writes while a migration runs.

    Raises:
        ConfigurationError: Dual write is on but the target is the current backend.
    """
    primary = load_provider(VECTOR_STORES, settings.vector_provider, settings, IVectorStore)  # type: ignore[type-abstract]
    if not settings.vector_migration_dual_write:
        return primary
    target = settings.vector_migration_target or next(
        (name for name in SHIPPED_VECTOR_STORES if name != settings.vector_provider), None
    )
    if target is None or target == settings.vector_provider:
        raise ConfigurationError(
            "AGENT_VECTOR_MIGRATION_DUAL_WRITE is on, but AGENT_VECTOR_MIGRATION_TARGET does "
            f"not name another backend than {settings.vector_provider!r}"
        )
    secondary = load_provider(VECTOR_STORES, target, settings, IVectorStore)  # type: ignore[type-abstract]
    return DualWriteVectorStore(primary, secondary)


def load_fallback_gateways(settings: AgentSettings) -> list[ILLMGateway]:
    """One gateway per ``AGENT_MODEL_FALLBACKS`` entry.

    Each gets the primary's settings with ``model`` replaced, and the gateway those settings
    name: ``AGENT_LLM_GATEWAY`` when set, else the one its model calls for (a local
    ``openai/`` primary may fall back to ``anthropic/...`` through litellm). No provider is
    imported here.
    """
    gateways: list[ILLMGateway] = []
    for model in settings.model_fallbacks:
        fallback = settings.model_copy(update={"model": model})
        gateways.append(
            load_provider(LLM_GATEWAYS, fallback.gateway_name, fallback, ILLMGateway)  # type: ignore[type-abstract]
        )
    return gateways


def build_model_gateway(
    settings: AgentSettings,
    primary: ILLMGateway,
    fallbacks: Sequence[ILLMGateway],
    counter: Callable[[], ITokenCounter],
) -> EstimatedUsageGateway:
    """``build_resilient_gateway``'s gateway, counting tokens a server did not report."""
    return EstimatedUsageGateway(build_resilient_gateway(settings, primary, fallbacks), counter)


def build_resilient_gateway(
    settings: AgentSettings, primary: ILLMGateway, fallbacks: Sequence[ILLMGateway]
) -> ResilientGateway:
    """The gateway the kernel calls: ``primary``, then ``fallbacks`` in order.

    With the kernel's retry policy, call deadline and a circuit breaker per model, as the
    ``AGENT_MODEL_*`` settings say. Each model's inline reasoning (``<think>`` blocks) is
    taken out of its answers before they are judged, so an answer that was all thinking is
    tried again like any empty one (``InlineReasoningGateway``).
    """
    return ResilientGateway(
        [InlineReasoningGateway(gateway) for gateway in (primary, *fallbacks)],
        policy=RetryPolicy(
            max_retries=settings.model_max_retries,
            base_delay_s=settings.model_retry_base_s,
            max_delay_s=settings.model_retry_max_delay_s,
            retry_after_cap_s=settings.model_retry_after_max_s,
            call_deadline_s=settings.model_call_deadline_s,
        ),
        breaker=BreakerSettings(
            failure_threshold=settings.model_breaker_failures,
            reset_after_s=settings.model_breaker_reset_s,
        ),
    )


ANSWER_RESERVE_TOKENS = 4096
"""Room left for the model's answer when the prompt budget comes from its input window."""


def build_prompt_window(
    settings: AgentSettings, llm: ILLMGateway, counter: Callable[[], ITokenCounter]
) -> PromptWindow | None:
    """A conversation's prompt window, or ``None`` when nothing bounds the prompt.

    ``AGENT_CONTEXT_MAX_TOKENS`` when set; else the gateway's input window less room for the
    answer (a quarter of small windows). The token counter is built on first need only.
    """
    budget = settings.context_max_tokens
    if not budget:
        window = llm.context_window()
        budget = window - min(ANSWER_RESERVE_TOKENS, window // 4) if window else 0
    return PromptWindow(counter, budget) if budget > 0 else None


SESSION_WINDOW_FALLBACK_TOKENS = 8192
"""A session's window when neither ``AGENT_SESSION_WINDOW_TOKENS`` nor a prompt budget is known."""


def build_session_conversations(
    settings: AgentSettings,
    task_store: ITaskStore,
    trace_store: ITraceStore,
    llm: ILLMGateway,
    counter: Callable[[], ITokenCounter],
    opened: OpenedStores,
    prompts: PromptSet | None = None,
    secrets: SecretSpans | None = None,
) -> SessionConversations | None:
    """Sessions as conversations, on the task store's session store (``None`` without one).

    Compaction summarizes with the ``summary`` prompt of ``prompts``.

    The window is ``AGENT_SESSION_WINDOW_TOKENS``; else half the prompt budget (the other
    half is the task's own turns'); else ``SESSION_WINDOW_FALLBACK_TOKENS``.
    """
    store = task_store.session_store()
    if store is None:
        return None
    opened.track(lambda: store)  # closed with the kernel's other stores
    summary_tokens = settings.session_summary_tokens
    if settings.session_window_tokens and settings.session_window_tokens < 2 * summary_tokens:
        raise ConfigurationError(
            f"AGENT_SESSION_WINDOW_TOKENS ({settings.session_window_tokens}) must be at least "
            f"twice AGENT_SESSION_SUMMARY_TOKENS ({summary_tokens})"
        )

    def window() -> int:
        # Asked when a session's first task starts: the model's window may need litellm.
        if settings.session_window_tokens:
            return settings.session_window_tokens
        prompt = build_prompt_window(settings, llm, counter)
        derived = prompt.max_tokens // 2 if prompt is not None else SESSION_WINDOW_FALLBACK_TOKENS
        return max(derived, 2 * summary_tokens)

    return SessionConversations(
        store,
        trace_store,
        llm=llm,
        counter=counter,
        window_tokens=window,
        summary_tokens=summary_tokens,
        result_chars=settings.session_result_chars,
        prompts=prompts,
        secrets=secrets,
    )


def load_document_loaders(settings: AgentSettings) -> list[IDocumentLoader]:
    """Every installed document loader."""
    return [
        load_provider(DOCUMENT_LOADERS, name, settings, IDocumentLoader)  # type: ignore[type-abstract]
        for name in installed_providers(DOCUMENT_LOADERS)
    ]


def build_router(
    settings: AgentSettings,
    llm: Callable[[], ILLMGateway],
    policy: IPolicyEngine,
    prompts: PromptSet | None = None,
) -> AdaptiveStrategyRouter:
    """The router as configured by ``AGENT_STRATEGY_MODE`` and ``AGENT_ROUTER_*``.

    ``llm`` is only called (and the gateway built) with ``AGENT_ROUTER_CLASSIFIER=model``; the
    model classifier asks with the ``classifier`` prompt of ``prompts``.
    """
    model_classifier = (
        ModelAssistedClassifier(llm(), prompts=prompts)
        if settings.router_classifier == "model"
        else None
    )
    return AdaptiveStrategyRouter(
        TaskClassifier(policy),
        model_classifier=model_classifier,
        mode=settings.strategy_mode,
        thresholds=RoutingThresholds(
            min_sub_goals=settings.router_min_sub_goals,
            min_dependent_sub_goals=settings.router_min_dependent_sub_goals,
            min_list_items=settings.router_min_list_items,
            long_context_tokens=settings.router_long_context_tokens,
        ),
    )


def build_redactor(settings: AgentSettings) -> Redactor:
    """What never reaches the stores.

    The configured keys, the host's credential variables, well-known key formats and
    ``AGENT_REDACT_PATTERNS``.
    """
    keys = [
        key.get_secret_value()
        for key in (settings.model_api_key, settings.embedding_api_key)
        if key is not None
    ]
    return Redactor(
        [*keys, *host_secrets(os.environ), *mcp_server_secrets(settings)],
        settings.redact_patterns,
    )


def mcp_server_secrets(settings: AgentSettings) -> list[str]:
    """The credentials of the MCP servers ``AGENT_MCP_FILE`` and ``AGENT_MCP_SERVERS`` declare.

    Values of credential-named headers (``Authorization: Bearer <token>`` gives the token)
    and ``env`` variables: a server that echoes one must not put it in the stores. A file
    that cannot be read gives only ``AGENT_MCP_SERVERS``'s here; the MCP provider reports it
    when it loads.
    """
    try:
        tables = settings.mcp_server_tables()
    except ConfigurationError:
        tables = dict(settings.mcp_servers)
    found: list[str] = []
    for table in tables.values():
        if not isinstance(table, dict):
            continue
        for field in ("headers", "env"):
            values = table.get(field)
            if not isinstance(values, dict):
                continue
            for name, value in values.items():
                if isinstance(value, str):
                    words = value.split()
                    found += host_secrets({str(name): words[-1]} if words else {})
    return found


def load_span_exporter(settings: AgentSettings) -> ISpanExporter | None:
    """The span exporter the settings name, or ``None`` when spans stay on this machine.

    A name that is not installed, an exporter whose optional extra is missing, or one that
    fails to be built for any reason but its settings, leaves export off with a warning: a
    task never fails for want of telemetry.

    Raises:
        ConfigurationError: The exporter's settings are wrong (no endpoint, say).
    """
    name = settings.span_exporter_name
    if name is None:
        return None
    try:
        return load_provider(SPAN_EXPORTERS, name, settings, ISpanExporter)  # type: ignore[type-abstract]
    except (ProviderNotFoundError, ExtraNotInstalledError) as exc:
        log.warning("spans are not exported: %s", exc)
        return None
    except ConfigurationError:
        raise
    except Exception as exc:
        # An exporter that fails to be built for a reason of its own (a bug, a setting its
        # checks let through): the tasks run, unexported, and the log says why.
        log.warning("spans are not exported: %s: %s", type(exc).__name__, exc)
        return None


def export_spans(
    store: ITraceStore, exporter: ISpanExporter | None, settings: AgentSettings
) -> ITraceStore:
    """``store``, which also queues each span it writes for ``exporter`` when there is one."""
    if exporter is None:
        return store
    return ExportingTraceStore(
        store, SpanExportQueue(exporter, max_spans=settings.span_export_queue)
    )


class OpenedStores:
    """The stores a container opened on first use, closed together with the kernel."""

    def __init__(self) -> None:
        self._stores: list[Closable] = []

    def track(self, build: Callable[..., T], *args: object) -> T:
        """Build a store and remember to close it."""
        store = build(*args)
        self._stores.append(store)  # type: ignore[arg-type]
        return store

    async def close(self) -> None:
        """Close every store opened so far, the latest first."""
        while self._stores:
            await self._stores.pop().close()


class KernelContainer(containers.DeclarativeContainer):
    """Wires settings, adapters, executors and the kernel; every provider is overridable."""

    settings = providers.Singleton(AgentSettings)
    prompts = providers.Singleton(load_prompt_set, settings.provided.prompts_dir)
    """The shipped prompts with ``AGENT_PROMPTS_DIR``'s overrides, checked when first built
    (the kernel needs it, so building the kernel fails on a bad prompt file)."""

    llm_gateway = providers.Singleton(
        load_provider, LLM_GATEWAYS, settings.provided.gateway_name, settings, ILLMGateway
    )
    """The configured model's gateway, as its provider built it (override it in tests)."""
    fallback_gateways = providers.Singleton(load_fallback_gateways, settings)
    task_store = providers.Singleton(
        load_provider, TASK_STORES, settings.provided.task_store, settings, ITaskStore
    )
    trace_store = providers.Singleton(
        load_provider, TRACE_STORES, settings.provided.trace_store, settings, ITraceStore
    )
    event_bus = providers.Singleton(InProcessEventBus)
    redactor = providers.Singleton(build_redactor, settings)
    # What the kernel writes through: every store redacts secrets on the way in.
    redacted_task_store = providers.Singleton(RedactingTaskStore, task_store, redactor)
    span_exporter = providers.Singleton(load_span_exporter, settings)
    """Where spans go besides the trace store (``AGENT_OTEL_ENDPOINT``...); ``None``: nowhere."""
    exporting_trace_store = providers.Singleton(export_spans, trace_store, span_exporter, settings)
    trace_recording = providers.Factory(
        TraceRecording,
        spans=settings.provided.tracing,
        content=settings.provided.trace_content,
        content_max_chars=settings.provided.trace_content_max_chars,
    )
    # Redacted, then cut to the cap (a cut never leaves part of a secret); none with tracing
    # off. The exporter gets the spans as stored.
    redacted_trace_store = providers.Singleton(
        RedactingTraceStore,
        providers.Singleton(RecordingTraceStore, exporting_trace_store, trace_recording),
        redactor,
    )

    embedder = providers.Singleton(
        load_provider, EMBEDDERS, settings.provided.embedder, settings, IEmbedder
    )
    opened = providers.Singleton(OpenedStores)
    vector_store = providers.Singleton(opened.provided.track.call(build_vector_store, settings))
    lexical_index = providers.Singleton(
        opened.provided.track.call(
            load_provider, LEXICAL_INDEXES, settings.provided.lexical_index, settings, ILexicalIndex
        )
    )
    token_counter = providers.Singleton(
        load_provider, TOKEN_COUNTERS, settings.provided.token_counter, settings, ITokenCounter
    )
    model_gateway = providers.Singleton(
        build_model_gateway, settings, llm_gateway, fallback_gateways, token_counter.provider
    )
    """What the kernel calls: ``llm_gateway`` and the fallbacks wrapped in retries, a deadline
    and circuit breakers, whatever gateway was configured or overridden; answers that came
    without token counts get estimated ones (``EstimatedUsageGateway``)."""
    document_catalog = providers.Singleton(
        opened.provided.track.call(
            load_provider,
            DOCUMENT_CATALOGS,
            settings.provided.document_catalog,
            settings,
            IDocumentCatalog,
        )
    )
    memory_store = providers.Singleton(
        RedactingMemoryStore,
        providers.Singleton(
            SemanticMemory,
            store=providers.Singleton(
                opened.provided.track.call(
                    load_provider,
                    MEMORY_STORES,
                    settings.provided.memory_store,
                    settings,
                    IMemoryStore,
                )
            ),
            vectors=vector_store,
            embedder=embedder,
        ),
        redactor,
    )
    retriever = providers.Singleton(
        HybridRetriever,
        vectors=vector_store,
        embedder=embedder,
        lexical=lexical_index,
        weights=providers.Factory(
            FusionWeights,
            vector=settings.provided.retrieval_vector_weight,
            lexical=settings.provided.retrieval_lexical_weight,
            rrf_k=settings.provided.retrieval_rrf_k,
            candidates=settings.provided.retrieval_candidates,
        ),
    )
    ingestion = providers.Singleton(
        IngestionPipeline,
        loaders=providers.Callable(load_document_loaders, settings),
        chunker=providers.Factory(
            TokenChunker,
            token_counter,
            chunk_tokens=settings.provided.chunk_tokens,
            overlap_tokens=settings.provided.chunk_overlap_tokens,
        ),
        embedder=embedder,
        vectors=vector_store,
        lexical=lexical_index,
        catalog=document_catalog,
        max_bytes=settings.provided.ingest_max_bytes,
        embed_batch_size=settings.provided.embedding_batch_size,
    )
    host_tools: providers.Object[tuple[ITool, ...]] = providers.Object(())
    """Tools the host passed in code (``create_kernel(tools=...)``), next to the installed ones."""
    deps: providers.Object[object] = providers.Object(None)
    """The host's objects for its tools (``ToolContext.deps``); this process's, never stored."""
    capabilities = providers.Singleton(load_capabilities, settings)
    """The business capabilities of ``AGENT_CAPABILITIES`` (closed with the kernel)."""
    tools_chosen = providers.Singleton(tool_choice, settings)
    """``AGENT_TOOLS`` split: names to find at start, and the MCP servers' tools it names."""
    tool_registry = providers.Singleton(
        add_capability_tools,
        providers.Singleton(
            load_tools,
            settings,
            providers.Callable(
                build_kernel_tools,
                settings,
                memory_store.provider,
                providers.Singleton(TracedRetriever, retriever).provider,
            ),
            host_tools,
            tools_chosen.provided[0],
        ),
        settings,
        capabilities,
        tools_chosen.provided[1],
    )

    checkpoint_store = providers.Singleton(
        load_provider,
        CHECKPOINT_STORES,
        settings.provided.checkpoint_store,
        settings,
        ICheckpointStore,
    )
    redacted_checkpoint_store = providers.Singleton(
        RedactingCheckpointStore, checkpoint_store, redactor
    )
    tool_call_ledger = providers.Singleton(
        load_provider,
        TOOL_CALL_LEDGERS,
        settings.provided.tool_call_ledger,
        settings,
        IToolCallLedger,
    )
    redacted_tool_call_ledger = providers.Singleton(
        RedactingToolCallLedger, tool_call_ledger, redactor
    )
    shell_parser = providers.Singleton(
        load_provider, SHELL_PARSERS, settings.provided.shell_parser, settings, IShellParser
    )
    sandbox = providers.Singleton(
        load_provider, SANDBOXES, settings.provided.sandbox, settings, IToolSandbox
    )
    policy_engine = providers.Singleton(
        RulePolicyEngine.from_file,
        settings.provided.policy_file,
        shell_parser=shell_parser,
        floor_rules=providers.Callable(capability_policy, capabilities),
    )
    tool_gate = providers.Singleton(
        ToolCallGate,
        policy_engine,
        approval_threshold=settings.provided.policy_approval_required_risk,
        grants=providers.Singleton(ApprovalGrants, shell_parser=shell_parser),
    )
    router = providers.Singleton(
        build_router, settings, model_gateway.provider, policy_engine, prompts
    )

    react_loop = providers.Singleton(
        ReActLoop,
        llm=model_gateway,
        tools=tool_registry,
        trace_store=redacted_trace_store,
        tool_timeout_s=settings.provided.tool_timeout_s,
        temperature=settings.provided.model_temperature,
        max_tokens=settings.provided.model_max_tokens,
        limits=providers.Factory(
            ReActLimits,
            max_observation_chars=settings.provided.max_observation_chars,
            max_parallel_tools=settings.provided.max_parallel_tools,
            error_streak_warning=settings.provided.tool_error_streak_warning,
        ),
        sandbox=sandbox,
        gate=tool_gate,
        secret_spans=redactor.provided.secret_spans,
        prompt_window=providers.Factory(
            build_prompt_window, settings, model_gateway, token_counter.provider
        ).provider,
        deps=deps,
    )
    planner = providers.Singleton(
        LLMPlanner,
        llm=model_gateway,
        trace_store=redacted_trace_store,
        max_attempts=settings.provided.plan_max_attempts,
        max_steps=settings.provided.plan_max_steps,
        temperature=settings.provided.model_temperature,
        max_tokens=settings.provided.model_max_tokens,
        prompts=prompts,
    )
    react_executor = providers.Singleton(
        ReActExecutor,
        loop=react_loop,
        checkpoints=redacted_checkpoint_store,
        ledger=redacted_tool_call_ledger,
    )
    plan_execute_executor = providers.Singleton(
        PlanExecuteExecutor,
        planner=planner,
        loop=react_loop,
        trace_store=redacted_trace_store,
        checkpoints=redacted_checkpoint_store,
        ledger=redacted_tool_call_ledger,
        limits=providers.Factory(
            PlanExecuteLimits,
            max_parallel_steps=settings.provided.plan_max_parallel_steps,
            step_max_turns=settings.provided.plan_step_max_turns,
            max_replans=settings.provided.plan_max_replans,
            fallback_max_turns=settings.provided.fallback_max_turns,
        ),
        prompts=prompts,
    )

    sessions = providers.Singleton(
        build_session_conversations,
        settings,
        redacted_task_store,
        redacted_trace_store,
        model_gateway,
        token_counter.provider,
        opened,
        prompts,
        redactor.provided.secret_spans,
    )
    """Sessions as conversations (history, compaction); ``None`` when the task store keeps no
    session history."""

    workflow_executor = providers.Singleton(
        build_workflow_executor, redacted_checkpoint_store, redacted_trace_store
    )
    kernel = providers.Singleton(
        kernel_with_workflows,
        workflow_executor,
        task_store=redacted_task_store,
        trace_store=redacted_trace_store,
        event_bus=event_bus,
        router=router,
        tools=tool_registry,
        executors=providers.Dict(
            react=react_executor,
            plan_execute=plan_execute_executor,
            workflow=workflow_executor,
        ),
        max_turns=settings.provided.max_turns,
        max_agent_depth=settings.provided.max_agent_depth,
        prompts=prompts,
        closables=providers.List(redacted_checkpoint_store, redacted_tool_call_ledger, opened),
        long_term_memory=memory_store.provider,
        memory_namespace=settings.provided.memory_namespace,
        recall_k=settings.provided.memory_recall_k,
        approval_timeout_s=settings.provided.approval_timeout_s,
        sandbox=sandbox,
        lease_s=settings.provided.task_lease_s,
        cancel_check_s=settings.provided.cancel_check_s,
        recovery=settings.provided.recovery,
        sessions=sessions,
        limits=settings.provided.task_limits,
        session_limits=settings.provided.session_limits,
        warm_up=model_gateway.provided.warm_up,
        connections=model_gateway.provided.connections,
        capabilities=capabilities,
        ingestion=ingestion.provider,
        knowledge_namespace=settings.provided.knowledge_namespace,
    )


def create_kernel(
    settings: AgentSettings | None = None,
    *,
    tools: Iterable[ITool] = (),
    approval_callback: ApprovalCallback | None = None,
    tool_hooks: Sequence[ToolHook] = (),
    deps: object = None,
    agent: AgentDefinition | str | os.PathLike[str] | None = None,
) -> AgentKernel:
    """Build a kernel from ``settings`` (or ``AGENT_*`` variables), resolving every provider now.

    ``tools`` (``@tool`` functions or ``ITool`` objects) join the installed tools and the
    kernel's own; ``settings.tools`` selects among those and never drops these.
    ``approval_callback`` (sync or async) decides calls at or above the approval threshold;
    without one such a call suspends its task in ``waiting_approval`` until
    ``resolve_approval``. ``tool_hooks`` run around every tool call, in order
    (``AgentKernel.add_tool_hook``). ``deps`` is what tools get as ``ToolContext.deps``
    (a parameter annotated ``ToolContext[MyDeps]`` of an ``@tool`` function): objects of this
    process, never stored, so a task resumed in another process (after a restart, or by
    ``core-agent resolve``) gets that process's deps, ``None`` if it passed none.

    ``agent`` is an agent file (a path, or what ``load_agent_file`` returned) applied over
    ``settings`` (see ``use_agent_file``).

    Raises:
        AgentFileError: ``agent`` is not a valid agent file, or names a tool or capability
            that is not installed.
        TypeError: ``tools`` is not a list of tools (a plain function lacks ``@tool``).
        ProviderNotFoundError: A configured provider name is not installed.
        ModelNotConfiguredError: The litellm gateway was chosen but no model is set.
        ConfigurationError: A prompt file of ``AGENT_PROMPTS_DIR`` is refused (see
            ``load_prompt_set``); two tools have the same name; ``deps`` is not of the type
            a tool's ``ToolContext[...]`` asks for.
    """
    given = host_tools(tools)
    check_deps(given, deps)
    container = KernelContainer()
    if settings is not None:
        container.settings.override(providers.Object(settings))
    container.host_tools.override(providers.Object(given))
    container.deps.override(providers.Object(deps))
    use_agent_file(container, agent)
    # The prompts and the tools first: a bad prompt file or two tools of one name stop
    # start-up before any store is opened.
    container.prompts()
    container.tool_registry()
    kernel: AgentKernel = container.kernel()
    kernel.set_approval_callback(approval_callback)
    for hook in tool_hooks:
        kernel.add_tool_hook(hook)
    return kernel


def use_agent_file(
    container: KernelContainer, agent: AgentDefinition | str | os.PathLike[str] | None
) -> AgentDefinition | None:
    """Configure ``container`` as the agent file ``agent`` says (nothing when ``None``).

    Its settings replace the container's (``AgentDefinition.apply``), its system prompt the
    ``system`` prompt, and its policy rules are read before the policy file's and the
    shipped ones if it is trusted, else only make calls safer, like capabilities' rules
    (``AgentDefinition.policy_layers``). The tools and capabilities it names are looked up
    now, so a missing one is reported at its line in the file. What the user should know
    (a model key withheld from the file's server) is logged as a warning.

    Raises:
        AgentFileError: The file is invalid, would lower safety without being trusted, or
            names a tool or capability not installed.
    """
    if agent is None:
        return None
    definition = agent if isinstance(agent, AgentDefinition) else load_agent_file(agent)
    settings = definition.apply(container.settings())
    for caution in definition.cautions(container.settings()):
        log.warning("%s", caution)
    container.settings.override(providers.Object(settings))
    if definition.system_prompt is not None:
        prompts = definition.prompts(load_prompt_set(settings.prompts_dir))
        container.prompts.override(providers.Object(prompts))
    if definition.policy_rules:
        preceding, floor = definition.policy_layers(settings)
        container.policy_engine.override(
            providers.Singleton(
                RulePolicyEngine.from_file,
                settings.policy_file,
                shell_parser=container.shell_parser,
                floor_rules=providers.Callable(capability_policy, container.capabilities, floor),
                preceding=preceding,
            )
        )
    kinds: dict[str, Literal["tool", "capability"]] = {TOOLS: "tool", CAPABILITIES: "capability"}
    try:
        container.tool_registry()  # loads the capabilities too
    except ProviderNotFoundError as exc:
        kind = kinds.get(exc.group)
        located = definition.not_installed(kind, exc.name, exc.installed) if kind else None
        if located is None:
            raise
        raise located from exc
    return definition


def create_sync_kernel(
    settings: AgentSettings | None = None,
    *,
    dispatch: Dispatch | None = None,
    approval_callback: HostApprover | None = None,
    **kernel_options: Any,
) -> SyncKernel:
    """A ``SyncKernel``: ``create_kernel(settings, **kernel_options)`` on its own loop thread.

    ``dispatch`` is where callbacks run and ``approval_callback`` is asked about risky calls
    on that thread (see ``SyncKernel``); every other argument is ``create_kernel``'s
    (``tools``, ``tool_hooks``, ``deps``...).
    Close it (or use it as a context manager) to stop its thread.
    """
    return SyncKernel(
        create_kernel(settings, **kernel_options),
        dispatch=dispatch,
        approval_callback=approval_callback,
    )
