"""One tool of an MCP server, as the kernel sees it: namespaced, validated, graded, untrusted.

* Its name is ``<server>__<tool>`` (characters other than letters, digits, ``_`` and ``-``
  become ``_``), which every chat-completions API accepts.
* Its arguments are checked against the server's input schema (JSON Schema) before the call,
  like a built-in tool's: a bad call is a clear tool error that never reaches the server.
  The check runs on the kernel's event loop, so its work is bounded (``schema_bounds``: a
  schema that expands too far, names anything outside itself or moves its base URI is
  refused when listed, a check past its steps fails; ``bounded_patterns``: a pattern too
  costly to compile is refused when listed, matching has a time limit), and it fetches
  nothing.
* Its capabilities are those declared for the server, plus ``read``: what it returns is
  content from outside the kernel, so the kernel wraps it as untrusted data, checks it for
  prompt injection and taints the task, as for a fetched page. A server declared ``exec``
  grades its calls high (its processes are not confined by the kernel's sandbox, so the
  tool is not declared ``exec`` itself). A server declared with no capabilities (none
  given, or an empty list) may do anything: its tools are ``read``, ``write`` and
  ``network``, and judged high risk, so they need a human's approval at the default
  threshold unless a policy rule grades them.
* A declaration is the user's word, and only ever added to: what the kernel or the server
  says a tool does joins it, so the policy (which grades ``write`` and ``network`` medium,
  and raises them once the task is tainted) sees the riskier reading. A tool of a server
  reached over the network (``McpServerSettings.over_network``) is ``network``: what a
  call sends leaves the machine. A tool the server annotates ``readOnlyHint: false`` or
  ``destructiveHint: true`` is ``write``, one annotated ``openWorldHint: true`` is
  ``network``. Only annotations the server states count (their absence is no claim), and
  none lowers anything: they come from the server, which the kernel does not trust to
  vouch for itself, so ``readOnlyHint: true`` leaves the declaration as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import SchemaError
from jsonschema.validators import (
    Draft3Validator,
    Draft4Validator,
    Draft202012Validator,
    validator_for,
)
from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)
from referencing.exceptions import Unresolvable as ReferencingError

from core_agent.contracts.errors import ToolArgumentsError, ToolExecutionError
from core_agent.contracts.tool import (
    TOOL_NAME_PATTERN,
    Capability,
    ITool,
    ToolAssessment,
    ToolContext,
    ToolSpec,
)
from providers.mcp.bounded_patterns import match_time_limit, pattern_problem, with_bounded_patterns
from providers.mcp.schema_bounds import (
    MAX_EXPANDED_NODES,
    REGISTRY,
    TooMuchWork,
    expanded_size,
    reference_problem,
    step_budget,
    subschemas,
    with_step_budget,
)
from providers.mcp.server_connection import McpServerError
from providers.mcp.server_pool import McpServers
from shared.agent_protocol import RiskLevel

log = logging.getLogger(__name__)

SEPARATOR = "__"
MAX_DESCRIPTION_CHARS = 1024
"""A server's description reaches every prompt: a long one costs tokens on every turn."""
MAX_REPORTED_PROBLEMS = 5
MAX_SCHEMA_CHARS = 16_000
"""A server's input schema reaches every prompt too: a bigger one is refused."""
MAX_SCHEMA_DEPTH = 16
MAX_RESULT_CHARS = 1_000_000
"""What a call returns beyond this is cut here (the kernel cuts it again for the model)."""
UNDECLARED = frozenset({Capability.READ, Capability.WRITE, Capability.NETWORK})


def kernel_name(server: str, tool: str) -> str:
    """``<server>__<tool>``, the tool's name in the kernel (may be too long: check it)."""
    return f"{server}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


class McpTool(ITool):
    """A tool of a declared MCP server; calls go to the server through ``servers``."""

    def __init__(self, servers: McpServers, server: str, tool: Tool) -> None:
        """Take ``tool`` as ``server`` listed it.

        Raises:
            ValueError: Its name cannot be made valid, or its input schema is not a valid
                JSON Schema of an object or could stall the kernel (the message says which).
        """
        self._servers = servers
        self._server = server
        self._remote = tool.name
        # An empty list vouches for nothing either: it is no declaration.
        declared = servers.settings(server).capabilities or None
        name = kernel_name(server, tool.name)
        if not TOOL_NAME_PATTERN.match(name):
            raise ValueError(f"its name {name!r} is longer than 64 characters")
        schema = dict(tool.input_schema)
        size = len(json.dumps(schema, ensure_ascii=False))
        if size > MAX_SCHEMA_CHARS:
            raise ValueError(f"its input schema has {size} characters (at most {MAX_SCHEMA_CHARS})")
        if _depth(schema) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if schema.get("type") != "object":
            raise ValueError("its input schema is not of type 'object'")
        validator_class = validator_for(schema, default=Draft202012Validator)
        try:
            validator_class.check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"its input schema is invalid: {exc.message}") from None
        legacy = validator_class in (Draft3Validator, Draft4Validator)
        problem = reference_problem(schema, ("$id", "id") if legacy else ("$id",))
        if problem is not None:
            raise ValueError(f"its input schema {problem}")
        for pattern in _patterns(schema):
            problem = pattern_problem(pattern)
            if problem is not None:
                raise ValueError(f"its input schema's pattern {pattern[:80]!r} {problem}")
        if expanded_size(schema) > MAX_EXPANDED_NODES:
            raise ValueError(
                "its input schema expands through its references to more than "
                f"{MAX_EXPANDED_NODES} objects and arrays (checking it would stall the kernel)"
            )
        self._validator = with_step_budget(with_bounded_patterns(validator_class))(
            schema, registry=REGISTRY
        )
        if declared is None:
            capabilities = UNDECLARED
        else:
            said = {Capability(c) for c in declared}
            if Capability.EXEC in said:
                said = (said - {Capability.EXEC}) | {Capability.WRITE}
            capabilities = frozenset(said | {Capability.READ})
        capabilities |= _annotated(tool)
        if servers.settings(server).over_network:
            capabilities |= {Capability.NETWORK}
        self._risk = RiskLevel.HIGH if declared is None or "exec" in declared else None
        description = (tool.description or tool.title or "").strip()
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[:MAX_DESCRIPTION_CHARS] + "…"
        self._spec = ToolSpec(
            name=name,
            description=f"(tool {tool.name!r} of the MCP server {server!r}) {description}".strip(),
            parameters=schema,
            capabilities=capabilities,
            # The kernel's own limit, a little after the server's: the clearer message wins.
            timeout_s=servers.settings(server).call_timeout_s + 1.0,
        )

    @property
    def server(self) -> str:
        """The server's name, as declared."""
        return self._server

    @property
    def remote(self) -> str:
        """The tool's name on its server."""
        return self._remote

    @property
    def spec(self) -> ToolSpec:
        """Name, the server's description and schema, capabilities as declared and found."""
        return self._spec

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """``arguments`` if they satisfy the server's input schema, else ``ToolArgumentsError``."""
        given = dict(arguments)
        steps = 0
        try:
            with match_time_limit(), step_budget(given) as steps:
                problems = sorted(
                    self._validator.iter_errors(given), key=lambda e: list(e.absolute_path)
                )
        except TooMuchWork:
            raise ToolArgumentsError(
                f"the arguments for tool {self._spec.name!r} cannot be checked: its server's "
                f"input schema takes more than {steps} steps for them (its references "
                "multiply the work with each level of the arguments)",
                tool_name=self._spec.name,
            ) from None
        except (RecursionError, ReferencingError) as exc:
            # A schema that refers to itself without end: the server's fault, told to the
            # model as this call's error rather than failing the task.
            raise ToolArgumentsError(
                f"the arguments for tool {self._spec.name!r} cannot be checked: its server's "
                f"input schema cannot be used ({type(exc).__name__})",
                tool_name=self._spec.name,
            ) from None
        if problems:
            text = "; ".join(
                f"{'.'.join(str(part) for part in problem.absolute_path) or '(arguments)'}: "
                f"{problem.message}"
                for problem in problems[:MAX_REPORTED_PROBLEMS]
            )
            raise ToolArgumentsError(
                f"invalid arguments for tool {self._spec.name!r}: {text}", tool_name=self._spec.name
            )
        return given

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """High risk for a server declared with no capabilities, or declared ``exec``."""
        return ToolAssessment(risk=self._risk, details={"mcp_server": self._server})

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Call the tool on its server; the server's error, a crash or a timeout is a tool error."""
        try:
            result = await self._servers.call_tool(self._server, self._remote, dict(arguments))
        except McpServerError as exc:
            raise ToolExecutionError(str(exc), tool_name=self._spec.name) from None
        text = result_text(result)
        if result.is_error:
            raise ToolExecutionError(
                text or f"{self._remote} failed without saying why", tool_name=self._spec.name
            )
        return text


def _annotated(tool: Tool) -> frozenset[Capability]:
    """What ``tool``'s annotations say it does beyond reading (see the module).

    A hint the server left out is no claim either way (the protocol's defaults would make
    every tool of an unannotated server a writer, overriding the user's declaration).
    """
    hints = tool.annotations
    if hints is None:
        return frozenset()
    said: set[Capability] = set()
    if hints.read_only_hint is False or hints.destructive_hint is True:
        said.add(Capability.WRITE)
    if hints.open_world_hint is True:
        said.add(Capability.NETWORK)
    return frozenset(said)


def result_text(result: CallToolResult) -> str:
    """What a call returned, as text: its text blocks; other content named, not shown."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            parts.append(f"[{block.type} ({block.mime_type}) not shown]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource {block.uri}]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri} ({resource.mime_type}) not shown]")
    if not parts and result.structured_content is not None:
        try:
            parts.append(json.dumps(result.structured_content, ensure_ascii=False))
        except (RecursionError, ValueError):
            parts.append("[structured content not shown: nested too deeply]")
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = f"{text[:MAX_RESULT_CHARS]}\n[cut: the server returned {len(text)} characters]"
    return text


def _patterns(schema: Mapping[str, Any]) -> list[str]:
    """The regular expressions of ``schema``: ``pattern`` values, ``patternProperties`` keys."""
    found: list[str] = []
    for node in subschemas(schema):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            found.extend(node["patternProperties"])
    return found


def _depth(value: Any, level: int = 0) -> int:
    """How deeply ``value`` nests (stops counting past ``MAX_SCHEMA_DEPTH``)."""
    if level > MAX_SCHEMA_DEPTH or not isinstance(value, dict | list):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(item, level + 1) for item in items), default=level)


def server_tools(servers: McpServers) -> list[ITool]:
    """The tools of every declared server (each started now), as the kernel's tools.

    A server that cannot start, or a tool the kernel cannot take (a name too long, a schema
    that is not an object's or that expands too far), is left out with a warning: the other
    servers' tools, and the server's other tools, still work. Of a server offering more than
    its ``max_tools``, the first ``max_tools`` it lists join; the warning says how many did not.
    """
    tools: list[McpTool] = []
    for server, listed in servers.list_tools().items():
        if isinstance(listed, McpServerError):
            log.warning("the tools of %s are not available: %s", server, listed)
            continue
        settings = servers.settings(server)
        wanted = [t for t in listed if settings.tools is None or t.name in settings.tools]
        if len(wanted) > settings.max_tools:
            log.warning(
                "MCP server %r offers %d tools; only its first %d join (max_tools), %d are "
                "left out: name the ones you want in its 'tools', or raise 'max_tools'",
                server,
                len(wanted),
                settings.max_tools,
                len(wanted) - settings.max_tools,
            )
            wanted = wanted[: settings.max_tools]
        for tool in wanted:
            try:
                tools.append(McpTool(servers, server, tool))
            except ValueError as exc:
                log.warning("tool %r of MCP server %r is left out: %s", tool.name, server, exc)
    return _without_collisions(tools)


def _without_collisions(tools: list[McpTool]) -> list[ITool]:
    """``tools`` less those whose kernel names collide, all of them (none is preferred).

    Replacing characters can give two tools of a server one name (tools ``a.b`` and
    ``a_b``): keeping either would let one tool answer for the other. (Two servers' tools
    never share a name: ``declared_servers`` refuses the server names that would allow it.)
    """
    by_name: dict[str, list[McpTool]] = {}
    for tool in tools:
        by_name.setdefault(tool.spec.name, []).append(tool)
    kept: list[ITool] = []
    for name, same in by_name.items():
        if len(same) == 1:
            kept.append(same[0])
            continue
        which = " and ".join(f"tool {t.remote!r} of MCP server {t.server!r}" for t in same)
        log.warning("%s would all be named %r: all of them are left out", which, name)
    return kept
