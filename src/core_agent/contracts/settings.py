"""The configuration contract: every setting the kernel and its providers read.

Values come from ``AGENT_*`` environment variables and, only when ``AGENT_ENV_FILE`` names
one, from that file: never from a ``.env`` in the current directory or a workspace, which a
model could write to loosen its own limits. An ``AGENT_*`` name the kernel does not know
(a typo) stops start-up with the closest known name. The container passes one
``AgentSettings`` to every provider factory, so a third-party provider reads its options from
the same place.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import platformdirs
from dotenv import dotenv_values
from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.trace_store import DEFAULT_CONTENT_MAX_CHARS
from shared.agent_protocol import RiskLevel, UsageLimits

MODEL_CONFIGURATION_HELP = """No model is configured.
Set AGENT_MODEL to any litellm model string, e.g.:
  AGENT_MODEL=openai/gpt-4o-mini                   (with OPENAI_API_KEY set)
  AGENT_MODEL=anthropic/claude-3-5-haiku-latest    (with ANTHROPIC_API_KEY set)
  AGENT_MODEL=ollama/llama3.2                      (a local Ollama; add
      AGENT_MODEL_API_BASE=http://host:11434 when it is not on localhost)
  AGENT_MODEL=openai/<model-name> AGENT_MODEL_API_BASE=http://localhost:8080/v1
                                                   (llama.cpp, vLLM or any OpenAI-compatible server)
AGENT_MODEL_API_KEY overrides the provider's own key variable."""
"""What to tell a user who has not configured a model."""


DEFAULT_ALLOWED_COMMANDS: tuple[str, ...] = (
    "ls", "cat", "head", "tail", "wc", "grep", "rg", "sort", "uniq", "cut", "diff", "echo",
    "pwd", "date", "stat", "file", "du", "tree", "which",
    "git status", "git diff", "git log", "git show", "git branch", "git rev-parse",
)  # fmt: skip
"""Read-only commands that run without approval by default; any other command (the tests,
a build, anything that writes) asks a human first, and every command runs confined."""

PREFIX = "AGENT_"
ENV_FILE_VARIABLE = "AGENT_ENV_FILE"

PLACEHOLDER_API_KEY = "no-key-required"
"""The key sent to a model server that is not to get a real one: a local OpenAI-compatible
server (llama.cpp, vLLM) ignores it, and litellm's client sends nothing without a key."""


def _default_data_dir() -> Path:
    # The platform's place for an application's data: $XDG_DATA_HOME (else ~/.local/share)
    # on Linux, ~/Library/Application Support on macOS, %LOCALAPPDATA% on Windows.
    return Path(platformdirs.user_data_dir("core-agent", appauthor=False))


class AgentSettings(BaseSettings):
    """Kernel configuration, read from ``AGENT_*`` variables."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=None, extra="ignore", frozen=True)

    env_file: Path | None = None
    """``AGENT_ENV_FILE``: the one file settings are also read from (the environment wins)."""
    ignored_variables: Annotated[tuple[str, ...], NoDecode] = ()
    """``AGENT_*`` names that belong to other software (Azure Pipelines sets ``AGENT_NAME``...)
    and are not typos of ours."""

    data_dir: Path = Field(default_factory=_default_data_dir)
    """Where the SQLite database and LanceDB folders live (by default the platform's user data
    directory: ``$XDG_DATA_HOME/core-agent``, else ``~/.local/share/core-agent``, on Linux)."""

    model: str | None = None
    """A litellm model string, e.g. ``openai/gpt-4o-mini`` or ``ollama/llama3.2``."""

    model_provider: str | None = None
    """litellm provider prefix, joined to a ``model`` that has none (``ollama`` + ``llama3.2``)."""

    model_api_base: str | None = None
    """Base URL of an OpenAI-compatible or other server (Ollama, llama.cpp, vLLM)."""

    model_api_key: SecretStr | None = None
    """API key; when unset, litellm reads the provider's own variable (``OPENAI_API_KEY``...)."""

    model_timeout_s: float = Field(default=120.0, gt=0)
    """Time limit of one request to the model."""
    model_max_retries: int = Field(default=2, ge=0, le=10)
    """Tries after the first, per model, when a call fails in a way that may pass (timeouts,
    rate limits, 5xx, a cut stream, an empty answer). The kernel retries (the gateway's own
    retries are off) and traces every try. The litellm embedder passes it to litellm."""
    model_retry_base_s: float = Field(default=0.5, ge=0)
    """Backoff before the first retry is at most this; the bound doubles with each retry and
    the wait is drawn at random below it (full jitter)."""
    model_retry_max_delay_s: float = Field(default=30.0, ge=0)
    """No backoff between two tries is longer than this."""
    model_retry_after_max_s: float = Field(default=60.0, ge=0)
    """A provider's ``Retry-After`` is honoured up to this many seconds."""
    model_call_deadline_s: float = Field(default=300.0, gt=0)
    """One model call (all its tries, waits and fallback models) ends by then: a try still
    running is cancelled, and a wait that would end later fails the call at once."""
    model_breaker_failures: int = Field(default=5, ge=1)
    """After this many failed tries of a model in a row (retryable failures), its circuit
    breaker opens: calls to it fail at once, and fallback models are used."""
    model_breaker_reset_s: float = Field(default=30.0, gt=0)
    """An open breaker lets one trial call through after this many seconds; success closes
    it, failure opens it again."""
    model_fallbacks: Annotated[tuple[str, ...], NoDecode] = ()
    """Models to try in order, comma-separated, when the primary model keeps failing or its
    breaker is open (``openai/gpt-4o-mini,ollama/llama3.2``); each with the same base URL and
    key as ``model``, by ``llm_gateway`` when it is set, else by the gateway its own name
    calls for (see ``gateway_name``)."""
    model_temperature: float | None = Field(default=None, ge=0, le=2)
    model_max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens the model may write in one answer of a task or plan; unset, the
    provider's default. An answer the limit cuts off is continued (see ``react_loop``)."""

    llm_gateway: str | None = None
    """Entry-point name of the gateway (``litellm``, ``openai_http``, ``scripted``); when unset,
    chosen from the model (see ``gateway_name``)."""

    scripted_model_script: Path | None = None
    """JSON script for the scripted model; its built-in demo policy when unset."""

    task_store: str = "sqlite"
    trace_store: str = "sqlite"
    tracing: bool = True
    """Whether the steps of tasks are written as spans (``core-agent trace``); off, the trace
    store keeps nothing new."""
    trace_content: bool = True
    """Whether spans hold what the steps saw and said: the messages sent to the model and its
    answers, tool arguments and results, retrieval queries and passages (redacted like
    everything stored, and kept only in the local trace store)."""
    trace_content_max_chars: int = Field(default=DEFAULT_CONTENT_MAX_CHARS, ge=100)
    """The longest text a span keeps; longer text keeps its head and says how much was cut."""
    checkpoint_store: str = "sqlite"
    tool_call_ledger: str = "sqlite"

    span_exporter: str | None = None
    """Entry-point name of the span exporter (``otlp``) that sends every finished span to a
    collector too. Unset: ``otlp`` when ``otel_endpoint`` is set or ``otel_use_env`` is on;
    else no span leaves this machine."""
    otel_endpoint: str | None = None
    """OTLP/HTTP collector spans are sent to: a base URL (``http://localhost:4318``, to which
    ``/v1/traces`` is added) or the full URL of its traces path."""
    otel_use_env: bool = False
    """Export spans to the collector the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable names when ``otel_endpoint`` is unset (else to
    OpenTelemetry's default, ``http://localhost:4318``). Off, those variables never turn
    export on, so spans do not follow a variable set for another program."""
    span_export_queue: int = Field(default=2048, ge=1, le=1_000_000)
    """Finished spans held for the exporter; while the collector is slower than the tasks,
    further spans are dropped for it (counted in a warning), never waited for."""
    log_format: Literal["text", "json"] = "text"
    """How the command line logs to stderr: ``text`` lines, or ``json``, one object a line
    (time, level, logger, message, and the task, trace and span the record was made in)."""

    task_lease_s: float = Field(default=30.0, ge=1.0, le=3600.0)
    """How long a running task stays this kernel's without a renewal (renewed every third of
    it while it runs). A task whose lease ran out is taken over by ``recover``."""
    recovery: Literal["resume", "fail", "off"] = "resume"
    """What a kernel does at start (``async with kernel``) and on ``core-agent recover`` with
    tasks whose owner died: resume them from their last checkpoint, fail them with a reason,
    or leave them."""
    cancel_check_s: float = Field(default=1.0, gt=0, le=60.0)
    """How often a running task looks for a cancel request made by another process."""

    tools: Annotated[tuple[str, ...] | None, NoDecode] = None
    """Names of the installed tools to enable (comma-separated); all when unset. May name
    declared MCP servers' tools (``<server>__<tool>``, ``<server>__*``): then only those of
    the servers' tools join (``core_agent.tooling.discovered_tool_selection``)."""
    capabilities: Annotated[tuple[str, ...], NoDecode] = ()
    """Business capability providers to enable (``core_agent.capabilities`` entry points,
    comma-separated, e.g. ``reader,coding_assistant``): their tools, context, policy rules
    and instructions join every task (see the README, "Business capabilities")."""

    mcp_file: Path | None = None
    """A file declaring MCP tool servers: TOML with ``[mcp_servers.<name>]`` tables, or
    JSON with an ``mcpServers`` object (Claude Desktop's format). See the README, "MCP tool
    servers"."""
    mcp_servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """MCP tool servers by name (JSON), declared like the tables of ``mcp_file``; a name
    in both is taken from here."""
    _mcp_file_read: tuple[Path, dict[str, Any]] | None = PrivateAttr(default=None)
    """``mcp_file`` and its tables as first read (see ``mcp_server_tables``)."""

    strategy_mode: Literal["adaptive", "react", "plan_execute"] = "adaptive"
    max_turns: int = Field(default=12, ge=1, le=1000)
    max_agent_depth: int = Field(default=3, ge=1, le=20)
    """How deep nested agents may go (an agent called as a tool is one level below its
    caller): a call that would go deeper is refused with a tool error."""
    tool_timeout_s: float = Field(default=60.0, gt=0)
    context_max_tokens: int = Field(default=0, ge=0)
    """Prompt budget of a conversation (messages plus tool schemas), in tokens: the opening
    messages and the newest turns that fit are sent. 0: the model's input window less room
    for the answer, when the gateway knows it (litellm's model table), else no limit."""
    session_window_tokens: int = Field(default=0, ge=0)
    """Most tokens a task of a session starts with: system prompt, recalled memories, the
    session's history (its summary and recent turns), the new message and the tool schemas.
    When the history would take more, its oldest turns are summarized by the model into one
    message. 0: half the prompt budget (``AGENT_CONTEXT_MAX_TOKENS`` or the model's window),
    else 8192."""
    session_summary_tokens: int = Field(default=512, ge=16)
    """Length asked of a session's summary (kept free for it in the session window)."""
    session_result_chars: int = Field(default=2000, ge=100)
    """A tool result kept in a session's history is cut to this many characters (head and
    tail); the task's own run saw it whole."""
    max_observation_chars: int = Field(default=8000, ge=200)
    """Tool output longer than this keeps its head and tail around a truncation marker."""
    max_parallel_tools: int = Field(default=4, ge=1, le=64)
    """How many tool calls of one model turn run at once."""
    tool_error_streak_warning: int = Field(default=3, ge=1)
    """After this many failed tool calls in a row, the model is asked to step back."""

    limit_input_tokens: int | None = Field(default=None, ge=1)
    """Default usage limits of every task (a request's own ``limits`` win, limit by limit):
    prompt tokens of all its model calls..."""
    limit_output_tokens: int | None = Field(default=None, ge=1)
    """...completion tokens..."""
    limit_total_tokens: int | None = Field(default=None, ge=1)
    """...both together..."""
    limit_cost_usd: float | None = Field(default=None, gt=0)
    """...the cost of its model calls (a call of unknown price counts 0)..."""
    limit_tool_calls: int | None = Field(default=None, ge=0)
    """...the tool calls it runs..."""
    limit_wall_time_s: float | None = Field(default=None, gt=0)
    """...and the running time of each of its runs (waits for a human do not count)."""
    session_limit_input_tokens: int | None = Field(default=None, ge=1)
    """Limits on the tasks of one session together, counted from the usage stored with each
    of them: prompt tokens..."""
    session_limit_output_tokens: int | None = Field(default=None, ge=1)
    """...completion tokens..."""
    session_limit_total_tokens: int | None = Field(default=None, ge=1)
    """...both together..."""
    session_limit_cost_usd: float | None = Field(default=None, gt=0)
    """...and cost."""

    router_classifier: Literal["deterministic", "model"] = "deterministic"
    """``model`` also asks the model to count sub-goals (one cheap call per task)."""
    router_min_sub_goals: int = Field(default=3, ge=2)
    router_min_dependent_sub_goals: int = Field(default=2, ge=2)
    router_min_list_items: int = Field(default=2, ge=2)
    router_long_context_tokens: int = Field(default=600, ge=1)

    plan_max_attempts: int = Field(default=3, ge=1, le=10)
    plan_max_steps: int = Field(default=8, ge=1, le=50)
    plan_max_parallel_steps: int = Field(default=3, ge=1, le=32)
    plan_step_max_turns: int = Field(default=6, ge=1, le=100)
    plan_max_replans: int = Field(default=1, ge=0, le=10)
    fallback_max_turns: int = Field(default=8, ge=1, le=100)

    prompts_dir: Path | None = None
    """A directory of ``<name>.md`` files that replace the shipped prompts of those names
    (``system``, ``planner``, ``step``, ``synthesis``, ``classifier``, ``summary``); checked
    when the kernel is built. See the README's Prompts section."""

    policy_file: Path | None = None
    """Your policy rules (TOML), read before the shipped defaults."""
    shell_parser: str = "tree_sitter"
    sandbox: str = "local"
    """Entry-point name of the tool sandbox."""
    workspace_roots: Annotated[tuple[Path, ...], NoDecode] = ()
    """Directories file tools may touch (``os.pathsep``- or comma-separated); the current
    directory when unset."""
    sandbox_allowed_commands: Annotated[tuple[str, ...], NoDecode] = DEFAULT_ALLOWED_COMMANDS
    """Command prefixes that may run (``git status``, ``ls``...); every sub-command must match."""
    sandbox_allowed_domains: Annotated[tuple[str, ...], NoDecode] = ("*",)
    """Hosts tools may fetch (``example.org``, ``*.example.org``); ``*`` is any public host.
    Private, loopback and link-local addresses are refused whatever this says."""
    sandbox_allowed_private_addresses: Annotated[tuple[str, ...], NoDecode] = ()
    """Exceptions to the private-address block, as exact ``address:port`` (a local service)."""
    sandbox_max_output_bytes: int = Field(default=65_536, ge=1024)
    sandbox_command_timeout_s: float = Field(default=30.0, gt=0)
    sandbox_max_fetch_bytes: int = Field(default=1_048_576, ge=1024)
    sandbox_max_redirects: int = Field(default=5, ge=0, le=20)
    sandbox_mode: Literal["confined", "unconfined"] = "confined"
    """``confined``: every command runs under the operating system's confinement (Landlock),
    and where that is missing commands are refused. ``unconfined``: commands run as plain
    processes (warned at start, recorded on every tool span)."""
    sandbox_namespaces: Literal["auto", "off"] = "auto"
    """Also give commands their own user, mount, PID and network namespaces when the machine
    allows it (``auto``)."""
    sandbox_read_paths: Annotated[tuple[Path, ...], NoDecode] = ()
    """More directories commands may read (a toolchain outside the system directories)."""
    sandbox_protected_paths: Annotated[tuple[Path, ...], NoDecode] = ()
    """Paths in the workspace that tools may never write (besides ``.git`` and the data
    directory)."""
    sandbox_cpu_seconds: int = Field(default=600, ge=1)
    sandbox_memory_mb: int = Field(default=4096, ge=16)
    sandbox_max_file_mb: int = Field(default=1024, ge=1)
    sandbox_max_processes: int = Field(default=512, ge=8)
    redact_patterns: Annotated[tuple[str, ...], NoDecode] = ()
    """Regular expressions (comma-separated) whose matches never reach events, traces,
    checkpoints or memories, besides the model key, the host's credential variables and
    well-known key formats."""

    vector_provider: str = "sqlite_vec"
    """Entry-point name of the vector store: ``sqlite_vec`` or ``lancedb``."""
    vector_migration_dual_write: bool = False
    """Also write every vector to ``vector_migration_target`` while migrating."""
    vector_migration_target: str | None = None
    """The backend being migrated to; the other shipped one when unset."""
    vector_sqlite_partitions: int = Field(default=4, ge=1, le=64)
    """sqlite-vec collections are split in this many partitions, searched in parallel."""
    vector_lancedb_nprobes: int = Field(default=20, ge=1)
    """Partitions an indexed LanceDB search visits (more is slower and more exact)."""

    embedder: str = "hashing"
    """Entry-point name of the embedder: ``hashing`` (offline, lexical), ``litellm``,
    ``model2vec`` (a local static model)."""
    embedding_model: str | None = None
    """litellm embedding model (``openai/text-embedding-3-small``, ``ollama/nomic-embed-text``)
    or, for ``model2vec``, the folder of a downloaded model."""
    embedding_dimension: int | None = Field(default=None, ge=1, le=16_384)
    """Vector length: required for ``litellm``; the ``hashing`` embedder's size (384)."""
    embedding_api_base: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_batch_size: int = Field(default=64, ge=1, le=2048)

    token_counter: str = "tiktoken"
    memory_store: str = "sqlite"
    document_catalog: str = "sqlite"
    memory_namespace: str = "default"
    """Long-term memory namespace of the ``remember``/``recall`` tools and task recall."""
    knowledge_namespace: str = "default"
    """Namespace ``core-agent ingest``, ``search`` and the ``knowledge_search`` tool use."""

    lexical_index: str = "tantivy"
    """Entry-point name of the keyword index: ``tantivy`` (a folder per namespace under
    ``AGENT_DATA_DIR/tantivy``), ``fts5`` (SQLite FTS5 in the kernel's database) or ``bm25``
    (rank-bm25, scores every passage in Python). After changing it, run
    ``core-agent keywords rebuild``."""
    retrieval_vector_weight: float = Field(default=1.0, ge=0)
    retrieval_lexical_weight: float = Field(default=1.0, ge=0)
    retrieval_rrf_k: int = Field(default=60, ge=1)
    """Reciprocal rank fusion constant: a hit at rank r scores weight / (rrf_k + r)."""
    retrieval_candidates: int = Field(default=50, ge=1, le=1000)
    """How many hits each side contributes to the fusion."""

    chunk_tokens: int = Field(default=256, ge=16, le=8192)
    chunk_overlap_tokens: int = Field(default=32, ge=0)
    ingest_max_bytes: int = Field(default=50_000_000, ge=1)
    """Files larger than this are refused before anything is written."""
    tokenizer_encoding: str = "cl100k_base"
    """tiktoken encoding used to count tokens (shipped offline: cl100k_base, o200k_base,
    p50k_base)."""
    memory_recall_k: int = Field(default=3, ge=0, le=50)
    """Long-term memories put in front of a task's context (0 turns it off)."""
    policy_approval_required_risk: RiskLevel = RiskLevel.HIGH
    trust_agent_file: bool = False
    """Let an agent file lower safety (``--trust-agent-file``): raise the approval threshold,
    open the network to commands, lower a call's risk with its rules, and get the
    environment's model key sent to an ``api_base`` it chose. Off, it can only make calls
    safer (see the README, "Agent files")."""
    approval_timeout_s: float = Field(default=600.0, gt=0)
    """A call waiting longer than this for a human is denied."""

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> AgentSettings:
        if self.chunk_overlap_tokens >= self.chunk_tokens:
            raise ValueError("chunk_overlap_tokens must be smaller than chunk_tokens")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then ``AGENT_ENV_FILE`` (and nothing else).

        Raises:
            ConfigurationError: ``AGENT_ENV_FILE`` is not a readable file of UTF-8 text, or
                an ``AGENT_*`` name in the environment or that file is not a setting.
        """
        ignored = _names(os.environ.get(f"{PREFIX}IGNORED_VARIABLES", ""))
        check_variable_names(os.environ, "the environment", ignored)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        named = os.environ.get(ENV_FILE_VARIABLE)
        if named:
            path = Path(named).expanduser()
            if not path.is_file():
                raise ConfigurationError(f"{ENV_FILE_VARIABLE}={named} is not a readable file")
            try:
                values = dotenv_values(path)
                check_variable_names(values, str(path), ignored)
                sources.append(DotEnvSettingsSource(settings_cls, env_file=path, env_prefix=PREFIX))
            except UnicodeDecodeError as exc:
                bad = exc.object[exc.start : exc.start + 1].hex()
                raise ConfigurationError(
                    f"{ENV_FILE_VARIABLE}={named} is not UTF-8 text (byte 0x{bad} at offset "
                    f"{exc.start}): save it as UTF-8"
                ) from None
            except OSError as exc:
                raise ConfigurationError(
                    f"{ENV_FILE_VARIABLE}={named} is not a readable file ({exc.strerror})"
                ) from None
        return tuple(sources)

    @field_validator(
        "tools",
        "capabilities",
        "model_fallbacks",
        "sandbox_allowed_commands",
        "sandbox_allowed_domains",
        "sandbox_allowed_private_addresses",
        "redact_patterns",
        "ignored_variables",
        mode="before",
    )
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(name.strip() for name in value.split(",") if name.strip())
        return value

    @field_validator("otel_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @field_validator(
        "workspace_roots", "sandbox_read_paths", "sandbox_protected_paths", mode="before"
    )
    @classmethod
    def _split_paths(cls, value: object) -> object:
        if isinstance(value, str):
            parts = value.replace(",", os.pathsep).split(os.pathsep)
            return tuple(Path(part.strip()) for part in parts if part.strip())
        return value

    @property
    def task_limits(self) -> UsageLimits:
        """The default usage limits of a task (``AGENT_LIMIT_*``)."""
        return UsageLimits(
            input_tokens=self.limit_input_tokens,
            output_tokens=self.limit_output_tokens,
            total_tokens=self.limit_total_tokens,
            cost_usd=self.limit_cost_usd,
            tool_calls=self.limit_tool_calls,
            wall_time_s=self.limit_wall_time_s,
        )

    @property
    def session_limits(self) -> UsageLimits:
        """The usage limits of a session's tasks together (``AGENT_SESSION_LIMIT_*``)."""
        return UsageLimits(
            input_tokens=self.session_limit_input_tokens,
            output_tokens=self.session_limit_output_tokens,
            total_tokens=self.session_limit_total_tokens,
            cost_usd=self.session_limit_cost_usd,
        )

    @property
    def database_path(self) -> Path:
        """The kernel's SQLite database file."""
        return self.data_dir / "core_agent.db"

    @property
    def lancedb_dir(self) -> Path:
        """The folder holding one LanceDB folder per vector namespace."""
        return self.data_dir / "lancedb"

    @property
    def resolved_model(self) -> str | None:
        """``model`` with ``model_provider`` prefixed when the model string has no provider."""
        if self.model is None:
            return None
        if self.model_provider and "/" not in self.model:
            return f"{self.model_provider}/{self.model}"
        return self.model

    @property
    def checked_model_api_base(self) -> str | None:
        """``model_api_base``, stripped, once it is a URL a model server can be reached at.

        Read by the gateways when they are built (with the kernel), so a mistyped one stops
        start-up before any task exists, rather than failing a task's every model call.

        Raises:
            ConfigurationError: It is not an http:// or https:// URL with a host (and a port
                that is a number up to 65535).
        """
        if self.model_api_base is None:
            return None
        try:
            return http_url(self.model_api_base)
        except ValueError as exc:
            raise ConfigurationError(f"AGENT_MODEL_API_BASE {exc}") from None

    @property
    def span_exporter_name(self) -> str | None:
        """The span exporter to load, or ``None`` when spans stay on this machine.

        ``span_exporter`` when set; else ``otlp`` once a collector is configured
        (``otel_endpoint``, or ``otel_use_env``).
        """
        if self.span_exporter:
            return self.span_exporter
        return "otlp" if self.otel_endpoint or self.otel_use_env else None

    def mcp_server_tables(self) -> dict[str, Any]:
        """The MCP servers declared, by name: ``mcp_file``'s tables, then ``mcp_servers``'s.

        A name in both is taken from ``mcp_servers``. The tables are as the user wrote them
        (the MCP provider validates them). The file is read once for these settings (and
        their copies naming the same file): the redactor, which learns the servers'
        credentials here, the MCP provider and the tool list all see one version of it, even
        when it is edited while the kernel starts.

        Raises:
            ConfigurationError: ``mcp_file`` cannot be read or parsed, or does not map
                server names to tables.
        """
        tables: dict[str, Any] = {}
        if self.mcp_file is not None:
            read = self._mcp_file_read
            if read is None or read[0] != self.mcp_file:
                read = self._mcp_file_read = (self.mcp_file, _read_mcp_file(self.mcp_file))
            tables.update(copy.deepcopy(read[1]))
        tables.update(self.mcp_servers)
        return tables

    @property
    def gateway_name(self) -> str:
        """The gateway to load: ``llm_gateway`` when set, else chosen from the model.

        ``openai/<name>`` at an ``model_api_base`` (a local or self-hosted OpenAI-compatible
        server) goes straight to it over HTTP (``openai_http``: starts in a tenth of a second,
        where importing litellm takes seconds); any other model through ``litellm``; no model,
        the shipped ``scripted`` demo.
        """
        if self.llm_gateway:
            return self.llm_gateway
        model = self.resolved_model
        if not model:
            return "scripted"
        if model.startswith("openai/") and self.model_api_base:
            return "openai_http"
        return "litellm"


def _read_mcp_file(path: Path) -> dict[str, Any]:
    """The server tables of an ``AGENT_MCP_FILE``: TOML ``mcp_servers`` or JSON ``mcpServers``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read AGENT_MCP_FILE {path}: {exc}") from exc
    try:
        if Path(path).suffix.lower() == ".json":
            document = json.loads(text)
            key = "mcpServers"
        else:
            document = tomllib.loads(text)
            key = "mcp_servers"
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"AGENT_MCP_FILE {path} cannot be parsed: {exc}") from exc
    servers = document.get(key, {}) if isinstance(document, dict) else None
    if not isinstance(servers, dict) or not all(isinstance(t, dict) for t in servers.values()):
        raise ConfigurationError(
            f"AGENT_MCP_FILE {path}: expected {key!r} to map server names to tables"
        )
    return servers


def http_url(value: str) -> str:
    """``value`` stripped, if it is an http:// or https:// URL with a host.

    Raises:
        ValueError: It is not.
    """
    scheme, _, rest = value.strip().partition("://")
    if scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise ValueError(f"must be an http:// or https:// URL, not {value!r}")
    try:
        # What every client of it reads it with: an unclosed [IPv6] host or a port that is
        # no number fails there, as a ValueError nobody expects (a run's, an export's).
        parts = urlsplit(value.strip())
        _ = parts.port  # read: one out of range or no number raises
    except ValueError as exc:
        raise ValueError(f"must be an http:// or https:// URL, not {value!r} ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, not {value!r}")
    return value.strip()


def known_variables() -> list[str]:
    """Every ``AGENT_*`` name a setting reads."""
    return sorted(f"{PREFIX}{name.upper()}" for name in AgentSettings.model_fields)


def _names(text: str) -> frozenset[str]:
    return frozenset(name.strip().upper() for name in text.split(",") if name.strip())


def check_variable_names(
    variables: Mapping[str, Any], source: str, ignored: Iterable[str] = ()
) -> None:
    """Refuse ``AGENT_*`` names that no setting reads, naming the closest known one.

    Raises:
        ConfigurationError: One or more unknown names (all are listed).
    """
    known = known_variables()
    skip = set(ignored)
    unknown = sorted(
        name
        for name in variables
        if name.upper().startswith(PREFIX)
        and name.upper() not in known
        and name.upper() not in skip
    )
    if not unknown:
        return
    lines = []
    for name in unknown:
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.5)
        lines.append(f"  {name}" + (f" (did you mean {close[0]}?)" if close else ""))
    raise ConfigurationError(
        f"unknown setting(s) in {source}:\n" + "\n".join(lines) + "\nKnown settings are "
        f"listed in the README; names another program uses can be listed in "
        f"{PREFIX}IGNORED_VARIABLES."
    )
