"""Declarative risk grading of tool calls.

Rules (TOML) match on the tool's name, its declared capabilities, argument patterns (path
globs, command globs for every sub-command, URL domains, compared after ``normalize_host``)
and whether the task's context is tainted by untrusted content. ``deny`` rules win over
everything, and so does the tool's own refusal (``ITool.assess``); otherwise the first
matching ``grade`` rule decides; otherwise the tool's own assessment does; otherwise its
capabilities. Taint raises write, exec and network calls by one level. The decision names
the rule that made it, for the trace.

Rules of business capabilities (``IBusinessCapabilityProvider.policy_rules``) can only make
a call safer: their deny rules join the others, and their grade rules set a floor (the call's
risk is the highest of the kernel's grading and every capability grade rule that matches,
before taint raises it).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.host_names import normalize_host
from core_agent.contracts.policy_engine import IPolicyEngine, PolicyDecision
from core_agent.contracts.shell_parser import IShellParser
from core_agent.contracts.tool import Capability, ToolAssessment, ToolSpec
from shared.agent_protocol import RiskLevel

PATH_ARGUMENTS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "directory",
        "dir",
        "folder",
        "target",
        "source",
        "destination",
        "pattern",
        "root",
    }
)
COMMAND_ARGUMENTS = frozenset({"command", "cmd", "script", "shell"})
URL_ARGUMENTS = frozenset({"url", "urls", "uri", "endpoint", "href", "link"})
_PARSED_COMMANDS_KEPT = 256
_TAINT_SENSITIVE = frozenset({Capability.WRITE, Capability.EXEC, Capability.NETWORK})
_CAPABILITY_RISK = {
    Capability.EXEC: RiskLevel.HIGH,
    Capability.WRITE: RiskLevel.MEDIUM,
    Capability.NETWORK: RiskLevel.MEDIUM,
    Capability.READ: RiskLevel.LOW,
}


class PolicyRule(BaseModel):
    """One rule; every condition given must hold for it to match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    effect: Literal["deny", "grade"] = "grade"
    risk: RiskLevel = RiskLevel.HIGH
    tools: tuple[str, ...] = ()
    capabilities: tuple[Capability, ...] = ()
    paths: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    tainted: bool | None = None
    network: bool = False
    """A grade rule that lets the commands it matches use the network."""
    reason: str = ""


class PolicyFile(BaseModel):
    """A policy file: ``[[rule]]`` tables."""

    model_config = ConfigDict(extra="forbid")

    rule: list[PolicyRule] = Field(default_factory=list)


def load_rules(text: str, source: str) -> list[PolicyRule]:
    """Rules from TOML text; ``ConfigurationError`` names the file and the problem."""
    try:
        return PolicyFile.model_validate(tomllib.loads(text)).rule
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ConfigurationError(f"invalid policy file {source}: {exc}") from exc


def capability_rules(name: str, text: str) -> list[PolicyRule]:
    """A capability's rules from its TOML text, named ``<name>:<rule name>``.

    Raises:
        ConfigurationError: The text is not a valid policy, or a rule sets ``network``
            (a capability may not open the network to commands).
    """
    rules = load_rules(text, f"of capability {name!r}") if text.strip() else []
    opening = [rule.name for rule in rules if rule.network]
    if opening:
        raise ConfigurationError(
            f"policy rules of capability {name!r} may not set network = true: {opening}"
        )
    return [rule.model_copy(update={"name": f"{name}:{rule.name}"}) for rule in rules]


def default_rules() -> list[PolicyRule]:
    """The rules shipped with the kernel."""
    text = resources.files("core_agent.safety").joinpath("default_policy.toml").read_text()
    return load_rules(text, "default_policy.toml")


_BELOW = "\x00"
"""Stands for "any file below" a walked directory (no real path holds a NUL byte)."""


@dataclass(frozen=True, slots=True)
class _CallFacts:
    paths: tuple[str, ...]
    """Every spelling of every path: what a deny rule matches any of."""
    graded_paths: tuple[tuple[str, ...], ...]
    """Each path the call touches, as the forms a grade rule must match one of."""
    commands: tuple[str, ...]
    domains: tuple[str, ...]
    unparsable_command: bool
    doubts: tuple[str, ...]


class RulePolicyEngine(IPolicyEngine):
    """Evaluates ``PolicyRule``s; pure, fast (no I/O), safe to share.

    ``floor_rules`` (a capability's) can only make calls safer: see the module's docstring.
    """

    def __init__(
        self,
        rules: Sequence[PolicyRule],
        *,
        shell_parser: IShellParser | None = None,
        floor_rules: Sequence[PolicyRule] = (),
    ) -> None:
        self._rules = [*rules, *(rule for rule in floor_rules if rule.effect == "deny")]
        self._floor = [rule for rule in floor_rules if rule.effect == "grade"]
        self._parser = shell_parser
        # A command is read once however often it is graded: a walking command's screen
        # grades it again for every file below its directory (``call_judgement._screen``).
        self._sub_commands = functools.lru_cache(maxsize=_PARSED_COMMANDS_KEPT)(self._split)
        # One compiled regular expression per rule and argument kind: matching is the hot path.
        self._compiled = {
            id(rule): (
                _compile(rule.paths, leading_any_dir=True),
                _compile(rule.commands),
                _compile([_host_pattern(domain) for domain in rule.domains]),
                _compile(rule.tools),
            )
            for rule in [*self._rules, *self._floor]
        }
        self._path_patterns = [
            paths for paths, _, _, _ in self._compiled.values() if paths is not None
        ]

    @classmethod
    def from_file(
        cls,
        path: Path | None,
        *,
        shell_parser: IShellParser | None = None,
        floor_rules: Sequence[PolicyRule] = (),
        preceding: Sequence[PolicyRule] = (),
    ) -> RulePolicyEngine:
        """``preceding`` rules (an agent file's), the user's, the shipped ones; ``floor_rules``."""
        rules: list[PolicyRule] = []
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(f"cannot read policy file {path}: {exc}") from exc
            rules = load_rules(text, str(path))
        return cls(
            [*preceding, *rules, *default_rules()],
            shell_parser=shell_parser,
            floor_rules=floor_rules,
        )

    def evaluate(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        tainted: bool = False,
        assessment: ToolAssessment | None = None,
    ) -> PolicyDecision:
        """Deny rules and the tool's refusal, then a grade rule, the tool's risk, capabilities.

        Taint raises write, exec and network calls by one level. Path rules see the paths
        the tool's ``assessment`` names (as the sandbox resolves them) when it names any, the
        path arguments' text otherwise (a grade rule normalized, a deny rule also as given).
        A call touching several paths is graded by its riskiest path.
        """
        facts = self._facts(arguments, assessment)
        denials = [
            r
            for r in self._rules
            if r.effect == "deny" and self._matches(r, spec, facts, tainted, True)
        ]
        if denials:
            first = denials[0]
            return PolicyDecision(
                risk=max((r.risk for r in denials), key=lambda r: r.rank),
                rule=first.name,
                denied=True,
                reason=first.reason or f"denied by rule {first.name}",
            )
        capability_risk = max(
            (_CAPABILITY_RISK[c] for c in spec.capabilities),
            key=lambda r: r.rank,
            default=RiskLevel.LOW,
        )
        if assessment is not None and assessment.refusal:
            return PolicyDecision(
                risk=capability_risk,
                rule=f"tool-check:{spec.name}",
                denied=True,
                reason=f"{spec.name} refuses the call: {assessment.refusal}",
            )
        allow_network = False
        if facts.unparsable_command and (assessment is None or assessment.risk is None):
            # No rule can vouch for a command nobody can read.
            risk = max(capability_risk, RiskLevel.HIGH, key=lambda r: r.rank)
            rule, reason = "unparsable-command", "the command cannot be parsed"
        else:
            # One grading per path: "README.md and .env" is as risky as ".env" alone.
            risk, rule, reason, allow_network = max(
                (
                    self._graded(spec, facts, tainted, forms, assessment, capability_risk)
                    for forms in facts.graded_paths or (None,)
                ),
                key=lambda graded: graded[0].rank,
            )
        # A capability's grade rule matches when any value does (like a deny rule): it can
        # only raise the risk, so matching more calls is the safe side.
        floor = max(
            (r for r in self._floor if self._matches(r, spec, facts, tainted, True)),
            key=lambda r: r.risk.rank,
            default=None,
        )
        if floor is not None and floor.risk.rank > risk.rank:
            risk, rule = floor.risk, floor.name
            reason = floor.reason or f"raised by rule {floor.name}"
        if tainted and spec.capabilities & _TAINT_SENSITIVE:
            raised = _one_up(risk)
            if raised is not risk:
                reason = f"{reason}; raised from {risk.value}: untrusted content is in context"
                risk = raised
        judged_by_tool = assessment is not None and assessment.risk is not None
        return PolicyDecision(
            risk=risk,
            rule=rule,
            denied=False,
            reason=reason,
            allow_network=allow_network,
            unproven=() if judged_by_tool else facts.doubts,
        )

    def _graded(
        self,
        spec: ToolSpec,
        facts: _CallFacts,
        tainted: bool,
        path_forms: tuple[str, ...] | None,
        assessment: ToolAssessment | None,
        capability_risk: RiskLevel,
    ) -> tuple[RiskLevel, str, str, bool]:
        """Risk, rule, reason and network of the call as if ``path_forms`` were its one path."""
        grade = next(
            (
                r
                for r in self._rules
                if r.effect == "grade" and self._matches(r, spec, facts, tainted, False, path_forms)
            ),
            None,
        )
        if grade is not None:
            return grade.risk, grade.name, grade.reason, grade.network
        if assessment is not None and assessment.risk is not None:
            reason = "graded by the tool's own check of the call"
            return assessment.risk, f"tool-check:{spec.name}", reason, False
        caps = ",".join(sorted(c.value for c in spec.capabilities)) or "none"
        rule = f"default:capabilities({caps})"
        return capability_risk, rule, "graded by declared capabilities", False

    def _facts(self, arguments: Mapping[str, Any], assessment: ToolAssessment | None) -> _CallFacts:
        paths: list[str] = []
        graded: list[tuple[str, ...]] = []
        commands: list[str] = []
        domains: list[str] = []
        unparsable = False
        doubts: list[str] = []
        resolved = assessment.paths if assessment is not None else ()
        for path in resolved:
            forms = _path_forms(path)
            paths.extend(forms)
            graded.append(forms)
        for name, value in arguments.items():
            values = [v for v in _strings(value)]
            key = name.lower()
            if key in PATH_ARGUMENTS and not resolved:
                # A tool that names the paths it touches knows which arguments are paths
                # (grep's "pattern" is a regular expression, not one) and where they lead.
                for text in values:
                    forms = _path_forms(text)
                    paths.extend([text, *forms])
                    graded.append(forms)
            if key in COMMAND_ARGUMENTS:
                for command in values:
                    split, ok, unproven = self._sub_commands(command)
                    commands.extend(split)
                    unparsable = unparsable or not ok
                    doubts.extend(d for d in unproven if d not in doubts)
            for text in values:
                if key in URL_ARGUMENTS or text.startswith(("http://", "https://")):
                    host = _url_host(text)
                    if host:
                        domains.append(host)
        return _CallFacts(
            tuple(dict.fromkeys(paths)),
            tuple(graded),
            tuple(commands),
            tuple(domains),
            unparsable,
            tuple(doubts),
        )

    def concerns_path(self, path: str) -> bool:
        """See ``IPolicyEngine.concerns_path``: any rule's path globs against its forms."""
        forms = _path_forms(path)
        return any(pattern.match(form) for pattern in self._path_patterns for form in forms)

    def _split(self, command: str) -> tuple[tuple[str, ...], bool, tuple[str, ...]]:
        """The sub-commands' texts, whether the line parsed, what could not be read."""
        if self._parser is None:
            return (command.strip(),), True, ()
        parsed = self._parser.parse(command)
        found = tuple(" ".join(c.argv) for c in parsed.commands)
        if not parsed.ok:
            # Deny rules still see every command the parser could find, and the raw line.
            return (*found, command.strip()), False, (f"cannot be parsed: {parsed.error}",)
        return found or (command.strip(),), True, parsed.unproven

    def _matches(
        self,
        rule: PolicyRule,
        spec: ToolSpec,
        facts: _CallFacts,
        tainted: bool,
        deny: bool,
        path_forms: tuple[str, ...] | None = None,
    ) -> bool:
        """Whether ``rule`` holds for the call.

        A deny rule (``deny``) matches when any value does; a grade rule only when all
        values do, so "git status" being low never makes "git status; rm -rf x" low. Its
        paths are ``path_forms``, one path's forms, of which one must match.
        """
        paths, commands, domains, tools = self._compiled[id(rule)]
        if tools is not None and not tools.match(spec.name):
            return False
        if rule.capabilities and not set(rule.capabilities) & spec.capabilities:
            return False
        if rule.tainted is not None and rule.tainted != tainted:
            return False
        if paths is not None and not deny:
            if not path_forms or not any(paths.match(form) for form in path_forms):
                return False
            paths = None
        for pattern, values in (
            (paths, facts.paths),
            (commands, facts.commands),
            (domains, facts.domains),
        ):
            if pattern is None:
                continue
            if not values:
                return False
            hits = [pattern.match(value) is not None for value in values]
            if not (any(hits) if deny else all(hits)):
                return False
        return True


def _compile(patterns: Sequence[str], *, leading_any_dir: bool = False) -> re.Pattern[str] | None:
    """Globs as one anchored regex; ``**/x`` also matches a bare ``x`` for paths."""
    if not patterns:
        return None
    expanded = list(patterns)
    if leading_any_dir:
        expanded += [p[3:] for p in patterns if p.startswith("**/")]
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in expanded))


def _url_host(url: str) -> str | None:
    """The URL's host as the SSRF guard reads it (``normalize_host``), or the raw form."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    try:
        return normalize_host(host)
    except ValueError:
        return host.lower()


def _host_pattern(pattern: str) -> str:
    """A domain glob in the form hosts are compared in (wildcards kept)."""
    try:
        return normalize_host(pattern.replace("*", "wildcard")).replace("wildcard", "*")
    except ValueError:
        return pattern.lower().rstrip(".")


def _path_forms(path: str) -> tuple[str, ...]:
    """``path`` normalized (``./a/../b/.`` is ``b``).

    A walked directory (``d/``) also stands as "a file below it", so that a rule on ``d/**``
    concerns the walk.
    """
    walked = path.endswith("/") and path.strip("/") != ""
    normal = posixpath.normpath(path) if path else path
    if normal.startswith("//"):
        normal = normal[1:]  # POSIX keeps two leading slashes; a file system does not
    if not walked:
        return (normal,)
    return (normal, _BELOW if normal == "." else f"{normal}/{_BELOW}")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str):
                yield item


def _one_up(risk: RiskLevel) -> RiskLevel:
    order = list(RiskLevel)
    ranked = sorted(order, key=lambda r: r.rank)
    return ranked[min(risk.rank + 1, len(ranked) - 1)]
