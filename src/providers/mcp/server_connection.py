"""One MCP server's session: started on first use, restarted once after a crash, stopped on close.

A session of the SDK (``mcp.Client``) must be entered and left by the same task (its transport
runs task groups), so each start runs a holder task that opens the session, hands it over, and
keeps it open until the connection stops it. Every method runs on the loop of ``McpServers``'
thread.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, Tool

from providers.mcp.server_process import ServerProcess
from providers.mcp.server_settings import McpServerSettings
from providers.mcp.tool_listing import ToolListingScreen

log = logging.getLogger(__name__)

MAX_STARTS = 2
"""A server is started once, and restarted once after it crashed; then it is given up."""
STDERR_TAIL_CHARS = 2000
MAX_PAGES = 100
"""Pages of ``tools/list`` read at most: a server that gives cursors without end (each page
kept, 600 MB in 16 s) is not read until its startup timeout."""
LISTING_SPARE = 64
"""Tools read past ``max_tools`` (of those its ``tools`` names) before the listing stops,
standing in for any the kernel leaves out (a name too long, a schema refused)."""
STOP_WAIT_S = 10.0
"""Longest a session may take to end (the SDK's stdio shutdown takes up to about 6 s); a
session that has not ended then (stuck in its handshake...) is canceled."""


class McpServerError(Exception):
    """A server could not be started, stopped during a call, or did not answer in time."""


class McpServerConnection:
    """The live session with one declared server, (re)started when a call needs it."""

    def __init__(self, name: str, settings: McpServerSettings) -> None:
        self.name = name
        self.settings = settings
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._started: asyncio.Future[Client] | None = None
        self._starting = asyncio.Lock()
        self._starts = 0
        self._given_up: str | None = None
        self._process: ServerProcess | None = None
        """The current run of a stdio server: its stderr's tail, its process group."""
        self._listed: dict[str, dict[str, Any]] | None = None
        """Input schemas by tool, as first listed: a restarted server must offer the same."""
        self._relisted: dict[str, dict[str, Any]] | None = None

    @property
    def starts(self) -> int:
        """How many times the server was started (2 at most)."""
        return self._starts

    async def list_tools(self) -> list[Tool]:
        """The wanted tools (``tools``, else all) the server offers (starting it if need be).

        Read page after page; the listing stops, with a warning, after the page where
        ``max_tools`` plus ``LISTING_SPARE`` wanted tools are read, or after ``MAX_PAGES``
        pages. A tool it lists wrongly (no input schema, an array's...) is left out with a
        warning, the others kept (``ToolListingScreen``).

        Raises:
            McpServerError: It could not be started, or did not list its tools in time.
        """
        tools = await self._list(await self._connected())
        if self._listed is None:
            self._listed = {tool.name: dict(tool.input_schema) for tool in tools}
        return tools

    async def _list(self, client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        named = self.settings.tools
        enough = self.settings.max_tools + LISTING_SPARE
        try:
            with anyio.fail_after(self.settings.startup_timeout_s):
                pages = 0
                while pages < MAX_PAGES:
                    page = await client.list_tools(cursor=cursor)
                    pages += 1
                    # Only the wanted are kept: pages of the others cost nothing once read.
                    tools.extend(t for t in page.tools if named is None or t.name in named)
                    cursor = page.next_cursor
                    if cursor is None:
                        return tools
                    if len(tools) >= enough:
                        break
                log.warning(
                    "MCP server %r has more tools than the %d it listed in %d pages; the "
                    "rest are not read (max_tools is %d)",
                    self.name,
                    len(tools),
                    pages,
                    self.settings.max_tools,
                )
                return tools
        except TimeoutError:
            raise McpServerError(
                f"MCP server {self.name!r} did not list its tools within "
                f"{self.settings.startup_timeout_s:g}s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                await self._crashed("while listing its tools", client)
            raise McpServerError(
                f"MCP server {self.name!r} could not list its tools: {exc.message}"
            ) from None

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call ``tool`` of the server (starting or restarting it if need be).

        Raises:
            McpServerError: The server could not be started, stopped during the call (it is
                then restarted on the next call, once), or did not answer within
                ``call_timeout_s``.
        """
        client = await self._connected()
        await self._check_unchanged(client, tool)
        timeout = self.settings.call_timeout_s
        try:
            with anyio.fail_after(timeout):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise McpServerError(
                f"MCP server {self.name!r} did not answer the call to {tool!r} within {timeout:g}s"
            ) from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpServerError(
                    f"MCP server {self.name!r} refused the call to {tool!r}: {exc.message}"
                ) from None
            reason = await self._crashed(f"during a call to {tool!r}", client)
            raise McpServerError(reason) from None
        except Exception as exc:  # the SDK refused the answer (against its output schema...)
            raise McpServerError(
                f"MCP server {self.name!r} answered the call to {tool!r} with a result that "
                f"cannot be used: {_describe(exc)}"
            ) from None

    async def close(self) -> None:
        """Stop the server (its process and everything it started) and wait until it is gone."""
        self._given_up = self._given_up or "the kernel was closed"
        await self._stop_session()
        if self._process is not None:
            self._process.close()

    async def _check_unchanged(self, client: Client, tool: str) -> None:
        """Refuse a call to a tool the restarted server no longer offers as first listed.

        The kernel validated the arguments against the first listing's schema, and the
        model was shown its description: a server that changed its tools when it restarted
        gets no call to a changed tool (a restart of the kernel lists them again).
        """
        if self._starts < 2 or self._listed is None:
            return
        if self._relisted is None:
            listed = await self._list(client)
            self._relisted = {t.name: dict(t.input_schema) for t in listed}
        if tool not in self._relisted:
            raise McpServerError(
                f"MCP server {self.name!r} no longer offers the tool {tool!r} since its restart"
            )
        if self._relisted[tool] != self._listed.get(tool):
            raise McpServerError(
                f"MCP server {self.name!r} changed the input schema of {tool!r} when it "
                "restarted; the call is refused (restart the kernel to list its tools again)"
            )

    async def _connected(self) -> Client:
        async with self._starting:
            if self._client is not None and not self._died_idle():
                return self._client
            if self._client is not None:
                # It stopped between calls: nothing was sent, so this call restarts it.
                await self._crashed("while idle", self._client)
            if self._given_up is not None:
                raise McpServerError(self._given_up)
            self._starts += 1
            stdio = self.settings.transport == "stdio"
            if self._starts > 1:
                verb = "restarting" if stdio else "reconnecting to"
                log.warning("%s MCP server %r (once, after it stopped)", verb, self.name)
            try:
                with anyio.fail_after(self.settings.startup_timeout_s):
                    self._client = await self._start()
            except Exception as exc:
                await self._stop_session()
                detail = "timed out" if isinstance(exc, TimeoutError) else _describe(exc)
                self._given_up = (
                    f"MCP server {self.name!r} could not be "
                    f"{'started' if stdio else 'reached'}: {detail}{self._stderr_tail()}"
                )
                log.warning("%s", self._given_up)
                raise McpServerError(self._given_up) from None
            return self._client

    async def _start(self) -> Client:
        started: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._started = started
        self._stop = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(started, self._stop))
        return await started

    async def _hold(self, started: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack)
                listings = ToolListingScreen(self.name)
                try:
                    client = await stack.enter_async_context(
                        Client(listings.around(transport), mode="auto")
                    )
                finally:
                    if self._process is not None:
                        self._process.spawned()
                listings.version = client.protocol_version
                started.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.debug("MCP server %r: its session ended with %r", self.name, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _died_idle(self) -> bool:
        return self._process is not None and not self._process.alive()

    async def _transport(self, stack: AsyncExitStack) -> Any:
        settings = self.settings
        if settings.command is not None:
            if self._process is not None:
                self._process.close()
            # Its stderr, drained into a tail quoted when the server fails; kept until the
            # next start or ``close``, its group killed when the session ends.
            self._process = ServerProcess()
            await self._process.drain()
            parameters = StdioServerParameters(
                command=settings.command,
                args=list(settings.args),
                env=dict(settings.env) or None,
                cwd=settings.cwd,
            )
            assert self._process.errlog is not None
            return stdio_client(parameters, errlog=self._process.errlog)
        assert settings.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=settings.headers,
                # No read limit: the transport reads each call's answer in a task of its
                # own, which a read timeout would fail, closing the whole session (every
                # call after it was refused as a crash). Calls are bounded in ``call_tool``.
                timeout=httpx2.Timeout(settings.startup_timeout_s, read=None),
            )
        )
        return streamable_http_client(settings.url, http_client=http)

    async def _crashed(self, when: str, client: Client) -> str:
        """Report the server gone, reap what is left of it; the next call restarts it.

        ``client`` is the session the failure came through: when it is no longer the
        current one (another call already handled that end, or restarted the server; the
        kernel is closing), the failure is reported and nothing else is done.
        """
        reason = f"MCP server {self.name!r} stopped {when}"
        if client is not self._client:
            if self._given_up is not None:
                return f"{reason} ({self._given_up})"
            return f"{reason}; it was restarted or will be on its next call"
        await self._stop_session()
        reason += self._stderr_tail()
        if self._starts >= MAX_STARTS:
            self._given_up = f"{reason}; it crashed again after its restart, so it stays stopped"
            reason = self._given_up
        else:
            again = "restarted" if self.settings.transport == "stdio" else "reconnected"
            reason += f"; it will be {again} on its next call"
        log.warning("%s", reason)
        return reason

    async def _stop_session(self) -> None:
        self._client = None
        holder, self._holder = self._holder, None
        if self._stop is not None:
            self._stop.set()
        if holder is not None:
            # A session still in its handshake never waits on ``stop``: it is canceled.
            started = self._started
            handshaken = started is not None and started.done() and not started.cancelled()
            await asyncio.wait({holder}, timeout=STOP_WAIT_S if handshaken else 0)
            if not holder.done():
                holder.cancel()
                await asyncio.wait({holder}, timeout=STOP_WAIT_S)
            if holder.done() and not holder.cancelled() and holder.exception() is not None:
                log.debug("MCP server %r: stopped", self.name, exc_info=holder.exception())
        if self._process is not None:
            # The SDK kills the group only when the server itself outlives its grace: what
            # a server that exited left running is killed here.
            await self._process.kill_group()

    def _stderr_tail(self) -> str:
        if self._process is None:
            return ""
        text = self._process.tail()[-STDERR_TAIL_CHARS:].strip()
        return f" (its stderr ends: {text})" if text else ""


def _describe(exc: BaseException) -> str:
    """The first underlying error of ``exc`` (the SDK's task groups wrap them in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
