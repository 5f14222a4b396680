"""The keys an agent file may hold, as pydantic models that refuse any other key.

Each section groups the knobs of one concern (the model, the policy, memory, the strategy);
``agent_definition`` maps them onto ``AgentSettings`` and checks each value against the
setting's own constraints, so ranges live in one place (the settings). Types here are what
YAML must give (a number, a list of names, one of a few words); a key set to nothing
(``max_turns:`` with no value) is refused before these models see it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core_agent.safety.policy_engine import PolicyRule
from shared.agent_protocol import RiskLevel, UsageLimits

Name = Annotated[str, Field(min_length=1)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    """``model:``: the model and its gateway (``model: openai/gpt-4o-mini`` is ``name``)."""

    name: Name | None = None
    """A litellm model string (``AGENT_MODEL``)."""
    provider: Name | None = None
    """Provider prefix for a ``name`` without one (``AGENT_MODEL_PROVIDER``)."""
    api_base: Name | None = None
    """Base URL of the server (``AGENT_MODEL_API_BASE``); keys stay in the environment, and
    are sent there only when the file is trusted (see ``AgentDefinition.apply``)."""
    gateway: Name | None = None
    """Entry-point name of the gateway, ``litellm`` or ``scripted`` (``AGENT_LLM_GATEWAY``)."""
    script: Name | None = None
    """The scripted model's JSON script, in the agent file's folder or below."""
    temperature: float | None = None
    max_tokens: int | None = None
    """Most tokens in one answer (``AGENT_MODEL_MAX_TOKENS``)."""
    timeout_s: float | None = None
    max_retries: int | None = None
    fallbacks: list[Name] | None = None
    """Models tried in order when this one keeps failing (``AGENT_MODEL_FALLBACKS``)."""


class PolicySection(_Section):
    """``policy:``: when a human must approve, and the agent's own rules."""

    approval_required_risk: RiskLevel | None = None
    """Calls graded at or above this wait for a human (``AGENT_POLICY_APPROVAL_REQUIRED_RISK``);
    above the settings' threshold only when the file is trusted."""
    approval_timeout_s: float | None = None
    file: Name | None = None
    """A TOML policy file in the agent file's folder; its rules follow ``rules`` (and the
    user's ``AGENT_POLICY_FILE`` still holds)."""
    rules: list[PolicyRule] | None = None
    """Rules in the policy engine's vocabulary. Trusted, they are read before the user's
    policy file and the shipped defaults (a deny rule still wins); otherwise they only make
    calls safer, like a business capability's."""


class MemorySection(_Section):
    """``memory:``: which namespaces the agent remembers in and searches, and recall."""

    namespace: Name | None = None
    """Long-term memory namespace (``AGENT_MEMORY_NAMESPACE``)."""
    knowledge_namespace: Name | None = None
    """Knowledge base namespace of ``knowledge_search`` (``AGENT_KNOWLEDGE_NAMESPACE``)."""
    recall: bool | None = None
    """Whether memories are put in front of each task; ``false`` is ``recall_k: 0``."""
    recall_k: int | None = None
    context_max_tokens: int | None = None
    session_window_tokens: int | None = None


class PlanSection(_Section):
    """``strategy.plan:``: plan-and-execute's bounds (``AGENT_PLAN_*``)."""

    max_steps: int | None = None
    max_attempts: int | None = None
    max_parallel_steps: int | None = None
    step_max_turns: int | None = None
    max_replans: int | None = None


class SessionLimits(_Section):
    """``strategy.session_limits:``: the tasks of one session together."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None


class StrategySection(_Section):
    """``strategy:``: how tasks are run and how far they may go."""

    mode: Literal["adaptive", "react", "plan_execute"] | None = None
    max_turns: int | None = None
    max_parallel_tools: int | None = None
    tool_timeout_s: float | None = None
    fallback_max_turns: int | None = None
    plan: PlanSection | None = None
    limits: UsageLimits | None = None
    """Every task's default usage limits (a request's own win, one by one)."""
    session_limits: SessionLimits | None = None


class AgentFileSpec(_Section):
    """An agent file."""

    version: Literal[1] = 1
    name: Name | None = None
    """The agent's name (the file's stem when absent); recorded with the tasks it runs."""
    description: str | None = None
    model: ModelSection | None = None
    system_prompt: Name | None = None
    system_prompt_file: Name | None = None
    """A text file in the agent file's folder or below; ``system_prompt`` or this, not both."""
    tools: list[Name] | None = None
    """Tool names and names of ``tool_sets``; all installed tools when absent."""
    tool_sets: dict[Name, list[Name]] | None = None
    """Named lists of tools (and of other sets) that ``tools`` can name."""
    policy: PolicySection | None = None
    memory: MemorySection | None = None
    strategy: StrategySection | None = None
    capabilities: list[Name] | None = None
    """Business capability providers to enable, by name."""
    mcp_servers: dict[Name, dict[str, Any]] | None = None
    """MCP tool servers by name, each table as in ``AGENT_MCP_FILE`` (``command`` and
    ``args``, or ``url``; ``capabilities``, ``tools``...). They join the servers of the
    settings (a name in both is the file's); only a trusted file may declare any: a server
    is a program started or an address reached, and its ``capabilities`` grade its calls."""

    @field_validator("model", mode="before")
    @classmethod
    def _model_name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value
