"""The declared MCP servers of one kernel, whose sessions live on a thread of their own.

Sessions are bound to the event loop that opened them, and a kernel may be driven from
several loops over its life (``asyncio.run`` twice, a ``SyncKernel``'s thread), so they get
a loop of their own: calls from the kernel cross to it and wait without blocking the
kernel's loop; listing tools, which the kernel does synchronously, waits on it. The thread
starts with the first server.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from mcp_types import CallToolResult, Tool

from providers.mcp.server_connection import McpServerConnection, McpServerError
from providers.mcp.server_settings import McpServerSettings

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_GRACE_S = 15.0
"""Longest ``close`` waits for the servers to stop (the SDK gives each a few seconds to exit
before it kills its process group)."""


class McpServers:
    """Connections to the declared servers by name; ``close`` stops every one of them."""

    def __init__(self, servers: Mapping[str, McpServerSettings]) -> None:
        self._settings = dict(servers)
        self._connections: dict[str, McpServerConnection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._closed = False

    @property
    def names(self) -> list[str]:
        """The declared servers' names."""
        return list(self._settings)

    def settings(self, name: str) -> McpServerSettings:
        """How server ``name`` is declared."""
        return self._settings[name]

    def list_tools(self) -> dict[str, list[Tool] | McpServerError]:
        """Every server's tools (each started now, all at once), or why it has none.

        Blocks until each has answered or timed out; must not be called on the servers'
        own loop.
        """
        if not self._settings:
            return {}  # no thread for nothing

        async def listing() -> dict[str, list[Tool] | McpServerError]:
            names = list(self._settings)
            found = await asyncio.gather(
                *(self._connection(name).list_tools() for name in names),
                return_exceptions=True,
            )
            outcome: dict[str, list[Tool] | McpServerError] = {}
            for name, tools in zip(names, found, strict=True):
                if isinstance(tools, BaseException) and not isinstance(tools, McpServerError):
                    tools = McpServerError(f"MCP server {name!r} failed: {tools!r}")
                outcome[name] = tools
            return outcome

        return self._submit(listing()).result()

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call ``tool`` of ``server`` on the servers' loop; canceling the wait cancels it.

        Raises:
            McpServerError: See ``McpServerConnection.call_tool``.
        """

        async def call() -> CallToolResult:
            return await self._connection(server).call_tool(tool, arguments)

        return await asyncio.wrap_future(self._submit(call()))

    def starts(self, server: str) -> int:
        """How many times ``server`` was started so far."""
        connection = self._connections.get(server)
        return 0 if connection is None else connection.starts

    async def close(self) -> None:
        """Stop every server that runs, then the thread; later calls fail as closed."""
        await asyncio.to_thread(self.close_now)

    def close_now(self) -> None:
        """``close`` from synchronous code (and at interpreter exit, if the host forgot)."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        atexit.unregister(self.close_now)

        async def stop_all() -> None:
            await asyncio.gather(*(c.close() for c in self._connections.values()))

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(STOP_GRACE_S)
        except Exception:
            log.warning("MCP servers did not all stop cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_GRACE_S)

    def _connection(self, name: str) -> McpServerConnection:
        if name not in self._connections:
            self._connections[name] = McpServerConnection(name, self._settings[name])
        return self._connections[name]

    def _submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._guard:
            if self._closed:
                work.close()
                raise McpServerError("the MCP servers were stopped with the kernel")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._run, args=(self._loop,), name="core-agent-mcp", daemon=True
                )
                self._thread.start()
                # A host that never closes its kernel still leaves no server behind.
                atexit.register(self.close_now)
            return asyncio.run_coroutine_threadsafe(work, self._loop)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
