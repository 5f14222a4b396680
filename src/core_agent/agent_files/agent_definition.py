"""An agent file loaded: the settings it changes, its system prompt and its policy rules.

``load_agent_file(path)`` reads, checks and maps a file, or raises ``AgentFileError`` naming
the line and column of every problem; nothing of a bad file is used. The result is applied
in layers (see the README, "Agent files")::

    explicit arguments (a request's force_mode, max_turns, tools, limits, system_prompt;
                        ``core-agent run --mode/--max-turns``; ``with_settings``)
      > the agent file (each key it sets)
      > the settings it is applied to: ``create_kernel(settings=...)``, else the AGENT_*
        environment, then AGENT_ENV_FILE
      > defaults

A file is only ever read when a user names it (``--agent FILE``, ``create_kernel(agent=...)``):
it is never looked for in the current directory or a workspace, which a model can write to.
Installation settings (where data lives, the sandbox, secrets) are not agent keys at all, and
the files it names are read only from its own folder (``referenced_files``).

Named is not trusted: a file is often someone else's (shared in a team, downloaded with a
project), so unless the user trusts it (``AGENT_TRUST_AGENT_FILE``, ``--trust-agent-file``)
it can only make calls safer than the settings it is applied to. ``apply`` refuses an approval
threshold above theirs and rules that open the network to commands; its rules act as a
business capability's (deny rules refuse, grade rules only raise a call's risk:
``policy_layers``); and when it chooses the model's server (``model.api_base``), the key of
the settings or of the environment is not sent there but a placeholder is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import SecretStr, TypeAdapter, ValidationError

from core_agent.agent_files.problems import AgentFileError, AgentFileProblem
from core_agent.agent_files.referenced_files import (
    ReferencedFile,
    UnusableFileError,
    read_beside,
)
from core_agent.agent_files.schema import AgentFileSpec
from core_agent.agent_files.validation_problems import (
    close_match,
    dotted,
    problem_at,
    validation_problems,
)
from core_agent.agent_files.yaml_document import Loc, YamlDocument
from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.settings import PLACEHOLDER_API_KEY, AgentSettings
from core_agent.prompts import PromptSet
from core_agent.safety.policy_engine import PolicyRule, load_rules
from shared.agent_protocol import RiskLevel

MAX_BYTES = 256_000
"""An agent file is a short document; a larger one is refused before it is parsed (a long
system prompt belongs in ``system_prompt_file``)."""

MAX_PROMPT_BYTES = 1_000_000
"""A file an agent file names (system prompt, policy, script) larger than this is refused
(a prompt that long would not fit a model's window)."""
TRUST_OPT_IN = "--trust-agent-file, or AGENT_TRUST_AGENT_FILE=true"
"""How a user trusts an agent file, as errors and warnings name it."""
MAX_PROBLEMS = 50
"""Problems described in full; a file with more is wrong in a way a list will not fix."""

_SETTINGS: Mapping[Loc, str] = {
    ("capabilities",): "capabilities",
    ("model", "name"): "model",
    ("model", "provider"): "model_provider",
    ("model", "api_base"): "model_api_base",
    ("model", "gateway"): "llm_gateway",
    ("model", "temperature"): "model_temperature",
    ("model", "max_tokens"): "model_max_tokens",
    ("model", "timeout_s"): "model_timeout_s",
    ("model", "max_retries"): "model_max_retries",
    ("model", "fallbacks"): "model_fallbacks",
    ("policy", "approval_required_risk"): "policy_approval_required_risk",
    ("policy", "approval_timeout_s"): "approval_timeout_s",
    ("memory", "namespace"): "memory_namespace",
    ("memory", "knowledge_namespace"): "knowledge_namespace",
    ("memory", "recall_k"): "memory_recall_k",
    ("memory", "context_max_tokens"): "context_max_tokens",
    ("memory", "session_window_tokens"): "session_window_tokens",
    ("strategy", "mode"): "strategy_mode",
    ("strategy", "max_turns"): "max_turns",
    ("strategy", "max_parallel_tools"): "max_parallel_tools",
    ("strategy", "tool_timeout_s"): "tool_timeout_s",
    ("strategy", "fallback_max_turns"): "fallback_max_turns",
    **{("strategy", "plan", name): f"plan_{name}" for name in (
        "max_steps", "max_attempts", "max_parallel_steps", "step_max_turns", "max_replans"
    )},
    **{("strategy", "limits", name): f"limit_{name}" for name in (
        "input_tokens", "output_tokens", "total_tokens", "cost_usd", "tool_calls", "wall_time_s"
    )},
    **{("strategy", "session_limits", name): f"session_limit_{name}" for name in (
        "input_tokens", "output_tokens", "total_tokens", "cost_usd"
    )},
}  # fmt: skip
"""Agent-file keys that set one setting each, with the setting's own checks."""


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """What an agent file declares, checked; ``create_kernel(agent=...)`` takes it.

    Attributes:
        name: The agent's name (the file's stem when it gives none).
        source: The file, as it was named.
        description: What the file says the agent is for.
        settings_updates: Settings the file sets, by ``AgentSettings`` field name.
        system_prompt: The system prompt, taken literally (no placeholders).
        policy_rules: Rules read before the policy file's and the shipped ones.
        capabilities: Business capability providers the file enables.
        recall: ``memory.recall`` as written (``None`` when absent).
        tool_positions: Line and column of each tool name, for errors found later.
        capability_positions: Line and column of each capability name, likewise.
        explicit: Settings given with ``with_settings`` rather than by the file.
        files: The agent file and the files it names, links resolved: tools may not
            write them (``sandbox_protected_paths``), as they may not write the policy file.
        places: Line and column of keys checked when the file is applied, by dotted name.
        needs_trust: What the file may only do when trusted (a rule that opens the network,
            MCP servers).
    """

    name: str
    source: str
    description: str = ""
    settings_updates: Mapping[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    policy_rules: tuple[PolicyRule, ...] = ()
    capabilities: tuple[str, ...] = ()
    recall: bool | None = None
    tool_positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    capability_positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()
    files: tuple[Path, ...] = ()
    places: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    needs_trust: tuple[AgentFileProblem, ...] = ()

    def apply(self, settings: AgentSettings) -> AgentSettings:
        """``settings`` with every setting this file sets replaced by the file's value.

        ``memory.recall: true`` without ``recall_k`` turns recall on with the default count
        when ``settings`` had it off, and keeps their count otherwise. Unless the file is
        trusted, a key of ``settings`` (or of the environment, which litellm would read) is
        not sent to a server the file chose: the placeholder key is (``withholds_key``).

        ``mcp_servers`` join the settings' servers (a name in both is the file's).

        Raises:
            AgentFileError: The file is not trusted and would lower safety below
                ``settings``: a higher approval threshold, a rule that opens the network,
                MCP servers.
        """
        updates = dict(self.settings_updates)
        if "mcp_servers" in updates and "mcp_servers" not in self.explicit:
            # The file's servers join the settings' (a name in both is the file's).
            updates["mcp_servers"] = {**settings.mcp_servers, **updates["mcp_servers"]}
        if self.recall and "memory_recall_k" not in updates and settings.memory_recall_k < 1:
            updates["memory_recall_k"] = AgentSettings.model_fields["memory_recall_k"].default
        if not updates.get("trust_agent_file", settings.trust_agent_file):
            problems = [*self.needs_trust, *self._threshold_problems(settings)]
            if problems:
                raise AgentFileError(self.source, problems)
            if self.withholds_key(settings):
                updates["model_api_key"] = SecretStr(PLACEHOLDER_API_KEY)
        if self.files:
            protected = (*settings.sandbox_protected_paths, *self.files)
            updates["sandbox_protected_paths"] = tuple(dict.fromkeys(protected))
        return settings.model_copy(update=updates)

    def withholds_key(self, settings: AgentSettings) -> bool:
        """Whether ``apply`` sends the placeholder key rather than the user's.

        True when the file, untrusted, sets ``model.api_base`` to another server than
        ``settings`` name and no key was given explicitly (``with_settings``).
        """
        base = self.settings_updates.get("model_api_base")
        trusted = self.settings_updates.get("trust_agent_file", settings.trust_agent_file)
        return not (
            trusted
            or base is None
            or "model_api_base" in self.explicit
            or "model_api_key" in self.explicit
            or base == settings.model_api_base
        )

    def cautions(self, settings: AgentSettings) -> list[str]:
        """What a user should be told when this file is applied over ``settings``."""
        if not self.withholds_key(settings):
            return []
        line, column = self.places.get("model.api_base", (0, 0))
        base = self.settings_updates["model_api_base"]
        return [
            AgentFileProblem(
                line,
                column,
                f"model.api_base sends the model's requests to {base}, which this agent file "
                f"chose: your API keys are not sent there (a placeholder key is); trust the "
                f"file to send them ({TRUST_OPT_IN})",
            ).located(self.source)
        ]

    def policy_layers(
        self, settings: AgentSettings
    ) -> tuple[tuple[PolicyRule, ...], tuple[PolicyRule, ...]]:
        """The file's rules as (read before the user's, rules that only make calls safer).

        Trusted (``settings.trust_agent_file``), they come first and their grade rules may
        lower a call's risk; otherwise they act as a business capability's: deny rules
        refuse, grade rules only raise a call's risk.
        """
        if settings.trust_agent_file:
            return self.policy_rules, ()
        return (), self.policy_rules

    def _threshold_problems(self, settings: AgentSettings) -> list[AgentFileProblem]:
        value = self.settings_updates.get("policy_approval_required_risk")
        if "policy_approval_required_risk" in self.explicit or value is None:
            return []
        risk = RiskLevel(value)  # a definition made in code may hold the word
        if risk.rank <= settings.policy_approval_required_risk.rank:
            return []
        line, column = self.places.get("policy.approval_required_risk", (0, 0))
        return [
            AgentFileProblem(
                line,
                column,
                f"policy.approval_required_risk: {risk.value!r} would let calls your settings "
                f"send to a human (from {settings.policy_approval_required_risk.value!r}) run "
                f"without asking; an agent file may only lower the threshold unless you trust "
                f"it ({TRUST_OPT_IN})",
            )
        ]

    def with_settings(self, **values: Any) -> AgentDefinition:
        """This definition with ``values`` (``AgentSettings`` fields) set over the file's.

        The explicit layer in code: ``load_agent_file(p).with_settings(model="ollama/x")``.

        Raises:
            UsageError: A name is not a setting, or a value fails the setting's checks.
        """
        checked = {}
        for name, value in values.items():
            if name not in AgentSettings.model_fields:
                known = list(AgentSettings.model_fields)
                raise UsageError(f"{name!r} is not a setting{close_match(name, known)}")
            try:
                checked[name] = _setting_check(name)(value)
            except ValidationError as exc:
                raise UsageError(f"{name}: {exc.errors()[0]['msg']}") from exc
        return replace(
            self,
            settings_updates={**self.settings_updates, **checked},
            explicit=self.explicit.union(checked),
        )

    def prompts(self, base: PromptSet) -> PromptSet:
        """``base`` with this agent's system prompt, if it has one."""
        if self.system_prompt is None:
            return base
        return base.with_literal("system", self.system_prompt, self.source)

    def not_installed(
        self, kind: Literal["tool", "capability"], name: str, installed: list[str]
    ) -> AgentFileError | None:
        """The error to raise when a tool or capability this file names is not installed.

        ``None`` when the file does not name ``name`` (it came from elsewhere).
        """
        positions = self.tool_positions if kind == "tool" else self.capability_positions
        if name not in positions:
            return None
        line, column = positions[name]
        return AgentFileError.at(
            self.source,
            line,
            column,
            f"no {kind} named {name!r} is installed{close_match(name, installed)}",
        )


def load_agent_file(path: str | os.PathLike[str]) -> AgentDefinition:
    """Read and check the agent file at ``path``; pass the result to ``create_kernel(agent=)``.

    Relative paths in the file (``system_prompt_file``, ``model.script``, ``policy.file``)
    are relative to the file's folder.

    Raises:
        AgentFileError: The file cannot be read or is not a valid agent file; every problem
            is listed with its line and column, the first one in the message.
    """
    source = os.fspath(path)
    file = Path(source).expanduser()
    document = YamlDocument.parse(_read(file, source), source)
    problems = _empty_values(document, document.data, (), set())
    try:
        spec = AgentFileSpec.model_validate(document.data)
    except ValidationError as exc:
        problems += validation_problems(exc, document, limit=MAX_PROBLEMS)
        raise AgentFileError(source, _first_per_place(problems)) from exc
    if problems:
        raise AgentFileError(source, problems)
    return _Mapper(spec, document, file, source).definition()


def _read(file: Path, source: str) -> str:
    if not file.is_file():
        reason = "no such file" if not file.exists() else "not a file"
        raise AgentFileError.at(source, 0, 0, f"cannot read the agent file: {reason}")
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        raise AgentFileError.at(
            source, 0, 0, f"cannot read the agent file: {exc.strerror}"
        ) from exc
    if len(raw) > MAX_BYTES:
        raise AgentFileError.at(
            source, 0, 0, f"larger than {MAX_BYTES:,} bytes: an agent file is a short document"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise AgentFileError.at(source, line, 1, "not UTF-8 text") from exc


def _empty_values(
    document: YamlDocument, value: Any, loc: Loc, seen: set[int]
) -> list[AgentFileProblem]:
    """A key given no value (``max_turns:``) is a mistake, not a way to unset a setting.

    A list or mapping an alias shares is looked at once (``seen``): nested aliases would
    otherwise make the walk exponential.
    """
    problems: list[AgentFileProblem] = []
    if id(value) in seen:
        return problems
    seen.add(id(value))
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        here = (*loc, key)
        if item is None:
            line, column = document.position(here, key=isinstance(value, dict))
            problems.append(
                AgentFileProblem(
                    line, column, f"{dotted(here)} has no value: give one or remove it"
                )
            )
        else:
            problems += _empty_values(document, item, here, seen)
    return problems


def _first_per_place(problems: list[AgentFileProblem]) -> list[AgentFileProblem]:
    """One problem per line and column: an empty value is also the schema's type error."""
    seen: dict[tuple[int, int], AgentFileProblem] = {}
    for problem in problems:
        seen.setdefault((problem.line, problem.column), problem)
    return list(seen.values())


@cache
def _setting_check(name: str) -> Callable[[Any], Any]:
    """Validates a value as the setting ``name`` does (its type and constraints)."""
    info = AgentSettings.model_fields[name]
    kind: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    return adapter.validate_python


class _Mapper:
    """Maps a valid ``AgentFileSpec`` onto settings, collecting every problem."""

    def __init__(self, spec: AgentFileSpec, document: YamlDocument, file: Path, source: str):
        self.spec = spec
        self.document = document
        self.folder = file.parent.resolve()
        self.source = source
        self.problems: list[AgentFileProblem] = []
        self.needs_trust: list[AgentFileProblem] = []
        self.updates: dict[str, Any] = {}
        self.files: list[Path] = [file.resolve()]

    def definition(self) -> AgentDefinition:
        spec = self.spec
        for loc, setting in _SETTINGS.items():
            value = _value_at(spec, loc)
            if value is not None:
                self._set(setting, tuple(value) if isinstance(value, list) else value, loc)
        tools, positions = self._tools()
        if tools is not None:
            self._set("tools", tools, ("tools",))
        if spec.model is not None and spec.model.script is not None:
            script = self._referenced(("model", "script"))
            if script is not None:
                self._set("scripted_model_script", script.path, ("model", "script"))
        rules = self._policy_rules()
        if spec.mcp_servers:
            self._set("mcp_servers", dict(spec.mcp_servers), ("mcp_servers",))
            line, column = self.document.position(("mcp_servers",), key=True)
            self.needs_trust.append(
                AgentFileProblem(
                    line,
                    column,
                    f"mcp_servers: {', '.join(spec.mcp_servers)}: an agent file may declare "
                    f"MCP servers (programs it starts, addresses it reaches, how their calls "
                    f"are graded) only when you trust it ({TRUST_OPT_IN}); or declare them "
                    f"yourself (AGENT_MCP_SERVERS, AGENT_MCP_FILE)",
                )
            )
        memory = spec.memory
        if memory is not None and memory.recall is False:
            if memory.recall_k:
                self._problem(("memory", "recall_k"), "memory.recall is false: recall_k has no use")
            self._set("memory_recall_k", 0, ("memory", "recall"))
        prompt = self._system_prompt()
        if self.problems:
            raise AgentFileError(self.source, self.problems)
        return AgentDefinition(
            name=spec.name or Path(self.source).stem,
            source=self.source,
            description=spec.description or "",
            settings_updates=self.updates,
            system_prompt=prompt,
            policy_rules=rules,
            capabilities=tuple(spec.capabilities or ()),
            recall=memory.recall if memory is not None else None,
            tool_positions=positions,
            capability_positions={
                name: self.document.position(("capabilities", index))
                for index, name in reversed(list(enumerate(spec.capabilities or ())))
            },
            files=tuple(dict.fromkeys(self.files)),
            places={
                dotted(loc): self.document.position(loc)
                for loc in (("model", "api_base"), ("policy", "approval_required_risk"))
            },
            needs_trust=tuple(self.needs_trust),
        )

    def _set(self, setting: str, value: Any, loc: Loc) -> None:
        try:
            self.updates[setting] = _setting_check(setting)(value)
        except ValidationError as exc:
            for detail in exc.errors(include_url=False):
                self.problems.append(problem_at(self.document, loc, detail))

    def _problem(self, loc: Loc, message: str, *, key: bool = False) -> None:
        line, column = self.document.position(loc, key=key)
        self.problems.append(AgentFileProblem(line, column, message))

    def _referenced(self, loc: Loc) -> ReferencedFile | None:
        """The file a path value names, read (see ``referenced_files``).

        ``None``, with a problem recorded, when it cannot be used.
        """
        try:
            found = read_beside(self.folder, str(_value_at(self.spec, loc)), MAX_PROMPT_BYTES)
        except UnusableFileError as exc:
            self._problem(loc, f"{dotted(loc)}: {exc}")
            return None
        self.files.append(found.path)
        return found

    def _policy_rules(self) -> tuple[PolicyRule, ...]:
        """The file's rules, then its policy file's; one that opens the network needs trust."""
        policy = self.spec.policy
        if policy is None:
            return ()
        rules = list(policy.rules or ())
        for index, rule in enumerate(rules):
            if rule.network:
                line, column = self.document.position(("policy", "rules", index, "network"))
                self.needs_trust.append(
                    AgentFileProblem(line, column, _opens_network(f"policy.rules[{index}]"))
                )
        if policy.file is not None:
            loc: Loc = ("policy", "file")
            found = self._referenced(loc)
            if found is not None:
                try:
                    read = load_rules(found.text, str(found.path))
                except ConfigurationError as exc:
                    self._problem(loc, " ".join(str(exc).split()))
                    read = []
                line, column = self.document.position(loc)
                self.needs_trust.extend(
                    AgentFileProblem(
                        line, column, _opens_network(f"policy.file: rule {rule.name!r}")
                    )
                    for rule in read
                    if rule.network
                )
                rules += read
        return tuple(rules)

    def _system_prompt(self) -> str | None:
        spec = self.spec
        if spec.system_prompt is not None and spec.system_prompt_file is not None:
            self._problem(
                ("system_prompt_file",),
                "give system_prompt or system_prompt_file, not both",
                key=True,
            )
            return None
        if spec.system_prompt_file is None:
            return spec.system_prompt
        found = self._referenced(("system_prompt_file",))
        if found is None:
            return None
        text = found.text.strip()
        if not text:
            name = spec.system_prompt_file
            self._problem(("system_prompt_file",), f"the system prompt file {name} is empty")
            return None
        return text

    def _tools(self) -> tuple[tuple[str, ...] | None, dict[str, tuple[int, int]]]:
        """Tool names with tool sets expanded, in order, once each; where each was named.

        Each set is expanded once, the first time it is met (later it adds nothing new), so
        sets that name each other many times over cost their length, not the number of
        paths through them; a loop, not the call stack, walks them (a chain may be long).
        """
        sets = self.spec.tool_sets or {}
        names: dict[str, None] = {}
        positions: dict[str, tuple[int, int]] = {}
        expanded: set[str] = set()

        def expand(root: str, root_loc: Loc) -> None:
            path: list[str] = []  # the sets being expanded, outermost first
            depth: dict[str, int] = {}
            pending: list[Iterator[tuple[int, str]]] = []

            def meet(name: str, loc: Loc) -> None:
                if name in depth:
                    cycle = " -> ".join((*path[depth[name] :], name))
                    self._problem(loc, f"tool set {name!r} contains itself ({cycle})")
                elif name in sets:
                    if name not in expanded:
                        expanded.add(name)
                        depth[name] = len(path)
                        path.append(name)
                        pending.append(iter(enumerate(sets[name])))
                elif name not in names:
                    names[name] = None
                    positions[name] = self.document.position(loc)

            meet(root, root_loc)
            while pending:
                step = next(pending[-1], None)
                if step is None:
                    pending.pop()
                    del depth[path.pop()]
                else:
                    meet(step[1], ("tool_sets", path[-1], step[0]))

        if self.spec.tools is None:
            for name in sets:  # still checked for cycles, still located
                expand(name, ("tool_sets", name))
            return None, positions
        for index, name in enumerate(self.spec.tools):
            expand(name, ("tools", index))
        return tuple(names), positions


def _opens_network(what: str) -> str:
    return (
        f"{what} sets network: true: an agent file's rules may not open the network to "
        f"commands unless you trust the file ({TRUST_OPT_IN})"
    )


def _value_at(spec: AgentFileSpec, loc: Loc) -> Any:
    value: Any = spec
    for part in loc:
        value = getattr(value, str(part), None)
        if value is None:
            return None
    return value
