"""One MCP server's session: started on first use, restarted once after a crash, stopped on close.

A session of the SDK (``mcp.Client``) must be entered and left by the same task (its transport
runs task groups), so each start runs a holder task that opens the session, hands it over, and
keeps it open until the connection stops it. Every method runs on the loop of ``McpServers``'
thread.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from contextlib import AsyncExitStack
from typing import IO, Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, Tool

from providers.mcp.server_settings import McpServerSettings

log = logging.getLogger(__name__)

MAX_STARTS = 2
"""A server is started once, and restarted once after it crashed; then it is given up."""
STDERR_TAIL_CHARS = 2000


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
        self._starting = asyncio.Lock()
        self._starts = 0
        self._given_up: str | None = None
        self._stderr: IO[str] | None = None

    @property
    def starts(self) -> int:
        """How many times the server was started (2 at most)."""
        return self._starts

    async def list_tools(self) -> list[Tool]:
        """Every tool the server offers, page after page (starting it if need be).

        Raises:
            McpServerError: It could not be started, or did not list its tools in time.
        """
        client = await self._connected()
        tools: list[Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.settings.startup_timeout_s):
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        return tools
        except TimeoutError:
            raise McpServerError(
                f"MCP server {self.name!r} did not list its tools within "
                f"{self.settings.startup_timeout_s:g}s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                await self._crashed("while listing its tools")
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
            reason = await self._crashed(f"during a call to {tool!r}")
            raise McpServerError(reason) from None

    async def close(self) -> None:
        """Stop the server (its process and everything it started) and wait until it is gone."""
        self._given_up = self._given_up or "the kernel was closed"
        await self._stop_session()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _connected(self) -> Client:
        async with self._starting:
            if self._client is not None:
                return self._client
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
        self._stop = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(started, self._stop))
        return await started

    async def _hold(self, started: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = await stack.enter_async_context(Client(transport, mode="auto"))
                started.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.debug("MCP server %r: its session ended with %r", self.name, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _transport(self, stack: AsyncExitStack) -> Any:
        settings = self.settings
        if settings.command is not None:
            if self._stderr is not None:
                self._stderr.close()
            # Its stderr goes to a file of ours, quoted when the server fails; the file
            # outlives this call (closed by the next start or by ``close``).
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            parameters = StdioServerParameters(
                command=settings.command,
                args=list(settings.args),
                env=dict(settings.env) or None,
                cwd=settings.cwd,
            )
            return stdio_client(parameters, errlog=self._stderr)
        assert settings.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=settings.headers,
                timeout=httpx2.Timeout(settings.startup_timeout_s, read=settings.call_timeout_s),
            )
        )
        return streamable_http_client(settings.url, http_client=http)

    async def _crashed(self, when: str) -> str:
        """Report the server gone, reap what is left of it; the next call restarts it."""
        await self._stop_session()
        reason = f"MCP server {self.name!r} stopped {when}{self._stderr_tail()}"
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
            try:
                await holder
            except BaseException:  # the session's end was logged by its holder
                log.debug("MCP server %r: stopped", self.name, exc_info=True)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            text = self._stderr.read()[-STDERR_TAIL_CHARS:].strip()
        except (OSError, ValueError):
            return ""
        return f" (its stderr ends: {text})" if text else ""


def _describe(exc: BaseException) -> str:
    """The first underlying error of ``exc`` (the SDK's task groups wrap them in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
