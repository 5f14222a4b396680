"""How MCP servers are declared: by name, over stdio (a command) or streamable HTTP (a URL).

The same table in ``AGENT_MCP_SERVERS`` (JSON) or in the file ``AGENT_MCP_FILE`` names
(TOML ``[mcp_servers.<name>]`` tables as Codex writes them, or JSON with an ``mcpServers``
object as Claude Desktop writes it)::

    [mcp_servers.time]
    command = "mcp-server-time"
    args = ["--local-timezone", "UTC"]
    capabilities = ["read"]

    [mcp_servers.notes]
    url = "http://127.0.0.1:8000/mcp"
    headers = { Authorization = "Bearer ..." }

``capabilities`` is what the user vouches the server's tools do (``read``, ``write``,
``network``, ``exec``); the policy grades calls by it. Left out, the server is undeclared and
its tools need a human's approval by default (see ``McpTool``). What the kernel knows itself
is added to it, never taken from it: a server at a URL whose host is not loopback is reached
over the network, so its tools are ``network`` whatever is declared.

A server's name may not hold ``__`` nor end with ``_``: its tools are named
``<server>__<tool>``, and the kernel (``AGENT_TOOLS``' ``<server>__*``, policy rules'
``tools = ["<server>__*"]``) takes what comes before the first ``__`` as the server. With
servers ``a`` and ``a_``, ``a___echo`` would be ``a``'s ``_echo`` as well as ``a_``'s
``echo``, and ``a__*`` would reach both: no reading of the name can tell them apart.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core_agent.contracts.errors import ConfigurationError
from core_agent.contracts.host_names import normalize_host
from core_agent.contracts.settings import AgentSettings

log = logging.getLogger(__name__)

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,30}$")
"""Short enough that ``<server>__<tool>`` leaves room for the tool's own name in 64."""
NAMESPACE_SEPARATOR = "__"
"""Between a server's name and its tool's (``McpTool``)."""
LOOPBACK_NAMES = frozenset({"localhost"})
"""Host names taken for loopback without asking a resolver (with 127.0.0.0/8 and ::1)."""

DeclaredCapability = Literal["read", "write", "network", "exec"]
DEFAULT_MAX_TOOLS = 64
"""Every tool reaches every model request: a server listing thousands would make each request
huge, and some APIs refuse it whole (OpenAI's takes 128 tools at most, the kernel's own
included). Name the wanted ones in ``tools``, or raise ``max_tools``, for a larger server."""


class McpServerSettings(BaseModel):
    """One server: a command to start (stdio) or a URL to reach (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(default=None, min_length=1)
    """The program to start; it speaks MCP on its stdin and stdout."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    """Variables added to the minimal environment the SDK gives a server (PATH, HOME...)."""
    cwd: Path | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    """A streamable HTTP endpoint (``http://host:port/mcp``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request to ``url`` (an ``Authorization`` token...)."""
    capabilities: tuple[DeclaredCapability, ...] | None = None
    """What its tools may do, as the user declares it; ``None``: undeclared."""
    tools: tuple[str, ...] | None = None
    """Only these of its tools (names as the server gives them); all when unset."""
    max_tools: int = Field(default=DEFAULT_MAX_TOOLS, ge=1)
    """At most this many of its tools join (the first it lists); the rest are left out."""
    call_timeout_s: float = Field(default=60.0, gt=0)
    """Longest a call may take before it is given up as a tool error."""
    startup_timeout_s: float = Field(default=30.0, gt=0)
    """Longest the server may take to start and list its tools."""

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (stdio) or 'url' (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("'args', 'env' and 'cwd' are for a 'command', not a 'url'")
        if self.command is not None and self.headers:
            raise ValueError("'headers' are for a 'url', not a 'command'")
        return self

    @property
    def transport(self) -> Literal["stdio", "streamable_http"]:
        """How the server is reached."""
        return "stdio" if self.command is not None else "streamable_http"

    @property
    def over_network(self) -> bool:
        """Whether a call leaves this machine: a ``url`` whose host is not loopback.

        Loopback is an address of 127.0.0.0/8 or ``::1`` written out, or the name
        ``localhost``; any other name counts as the network, even one that resolves to
        loopback (the kernel does not ask a resolver here, and what it says may change).
        """
        if self.url is None:
            return False
        return not _loopback(urlsplit(self.url).hostname or "")

    @property
    def credentials_in_clear(self) -> bool:
        """Whether credentials (``headers``, a password in ``url``) cross the network unencrypted.

        That is: sent over plain ``http`` to a host that is not loopback.
        """
        if self.url is None or not self.over_network:
            return False
        parts = urlsplit(self.url)
        credentials = bool(self.headers) or parts.password is not None
        return credentials and parts.scheme.lower() == "http"


def _loopback(host: str) -> bool:
    try:
        name = normalize_host(host)
    except ValueError:
        return False
    if name in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def declared_servers(settings: AgentSettings) -> dict[str, McpServerSettings]:
    """The servers of ``AGENT_MCP_FILE`` and ``AGENT_MCP_SERVERS`` (which wins on a name).

    Raises:
        ConfigurationError: The file cannot be read or parsed, a name is not made of
            letters, digits, ``_`` and ``-`` (30 at most), holds ``__`` or ends with ``_``
            (see the module), or a server's table is wrong; the message names the server and
            the field.

    A server whose ``headers`` go to a host on the network over plain ``http`` is logged as a
    warning: its credentials cross the network unencrypted.
    """
    tables = settings.mcp_server_tables()
    source = "AGENT_MCP_SERVERS"
    if settings.mcp_file is not None:
        source = f"{settings.mcp_file} or AGENT_MCP_SERVERS"
    servers: dict[str, McpServerSettings] = {}
    for name, table in tables.items():
        if not SERVER_NAME.match(name):
            raise ConfigurationError(
                f"MCP server name {name!r} (in {source}) must match {SERVER_NAME.pattern}"
            )
        if NAMESPACE_SEPARATOR in name or name.endswith("_"):
            raise ConfigurationError(
                f"MCP server name {name!r} (in {source}) may not contain "
                f"{NAMESPACE_SEPARATOR!r} nor end with '_': its tools are named "
                f"'<server>{NAMESPACE_SEPARATOR}<tool>', and with such a name they could not "
                "be told from another server's (rename it, for example with '-')"
            )
        try:
            servers[name] = McpServerSettings.model_validate(table)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(table)'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise ConfigurationError(
                f"MCP server {name!r} (in {source}) is declared wrongly: {problems}"
            ) from None
        if servers[name].credentials_in_clear:
            log.warning(
                "MCP server %r is reached at host %r over plain http: its credentials "
                "(headers) cross the network unencrypted; use https",
                name,
                urlsplit(servers[name].url or "").hostname,
            )
    return servers
