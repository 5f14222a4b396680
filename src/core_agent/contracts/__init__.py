"""The ports: one abstract class per module, nothing concrete.

Adapters in ``providers`` and ``business_adapters`` implement these; the kernel depends on them
only. Import ports from their modules (``core_agent.contracts.tool``) or from here.
"""

from core_agent.contracts.approval_gateway import ApprovalCallback, IApprovalGateway
from core_agent.contracts.business_capability_provider import (
    CapabilityDocument,
    IBusinessCapabilityProvider,
)
from core_agent.contracts.checkpoint_store import ICheckpointStore
from core_agent.contracts.document_catalog import DocumentRecord, IDocumentCatalog
from core_agent.contracts.document_loader import IDocumentLoader, LoadedDocument
from core_agent.contracts.embedder import IEmbedder
from core_agent.contracts.event_bus import IEventBus, Subscription
from core_agent.contracts.executor import (
    EventSink,
    ExecutionContext,
    ExecutionOutcome,
    HumanChannel,
    IExecutor,
    RunState,
    RunStats,
    TaskIdentity,
)
from core_agent.contracts.lexical_index import ILexicalIndex, LexicalHit
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
    ToolDefinition,
)
from core_agent.contracts.memory_store import IMemoryStore, MemoryItem
from core_agent.contracts.planner import IPlanner, Plan, PlanStep
from core_agent.contracts.policy_engine import IPolicyEngine, PolicyDecision
from core_agent.contracts.retriever import IRetriever, RetrievalHit
from core_agent.contracts.session_store import DeletedSession, ISessionStore, SessionHistory
from core_agent.contracts.span_exporter import ISpanExporter
from core_agent.contracts.strategy_router import IStrategyRouter, RoutingDecision
from core_agent.contracts.task_store import ITaskStore
from core_agent.contracts.token_counter import ITokenCounter
from core_agent.contracts.tool import Capability, ITool, ToolContext, ToolSpec
from core_agent.contracts.tool_hook import HookVerdict, ToolHook, ToolHookContext, tool_hook
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.contracts.tool_sandbox import IToolSandbox, SandboxVerdict
from core_agent.contracts.trace_store import ITraceStore, Span
from core_agent.contracts.vector_store import (
    CollectionInfo,
    IVectorStore,
    VectorHit,
    VectorRecord,
)

__all__ = [
    "ApprovalCallback",
    "Capability",
    "CapabilityDocument",
    "CollectionInfo",
    "DeletedSession",
    "DocumentRecord",
    "EventSink",
    "ExecutionContext",
    "ExecutionOutcome",
    "HookVerdict",
    "HumanChannel",
    "IApprovalGateway",
    "IBusinessCapabilityProvider",
    "ICheckpointStore",
    "IDocumentCatalog",
    "IDocumentLoader",
    "IEmbedder",
    "IEventBus",
    "IExecutor",
    "ILLMGateway",
    "ILexicalIndex",
    "IMemoryStore",
    "IPlanner",
    "IPolicyEngine",
    "IRetriever",
    "ISessionStore",
    "ISpanExporter",
    "IStrategyRouter",
    "ITaskStore",
    "ITokenCounter",
    "ITool",
    "IToolRegistry",
    "IToolSandbox",
    "ITraceStore",
    "IVectorStore",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamItem",
    "LLMTextDelta",
    "LexicalHit",
    "LoadedDocument",
    "MemoryItem",
    "Plan",
    "PlanStep",
    "PolicyDecision",
    "RetrievalHit",
    "RoutingDecision",
    "RunState",
    "RunStats",
    "SandboxVerdict",
    "SessionHistory",
    "Span",
    "Subscription",
    "TaskIdentity",
    "ToolContext",
    "ToolDefinition",
    "ToolHook",
    "ToolHookContext",
    "ToolSpec",
    "VectorHit",
    "VectorRecord",
    "tool_hook",
]
