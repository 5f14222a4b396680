"""A server's tool listing taken tool by tool: one malformed tool costs that tool, not the list.

The SDK parses a ``tools/list`` answer as a whole, so a single tool without an input schema,
or with an array's, used to refuse all of the server's tools. ``ToolListingScreen`` sits
between the transport and the SDK's session: it notes which requests are ``tools/list`` and,
in their answers, checks each tool as the SDK would (against the negotiated protocol
version's types, then the SDK's own), leaves out those that fail with a warning naming them,
and passes the rest on. The SDK's own listings (to learn a tool's output schema) go through
it too, so they agree with the kernel's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, ListToolsResult
from mcp_types.methods import validate_server_result
from pydantic import ValidationError

log = logging.getLogger(__name__)

LIST_TOOLS = "tools/list"


class ToolListingScreen:
    """Screens the ``tools/list`` answers of one server's session (see module)."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._asked: set[str | int] = set()
        self.version: str | None = None
        """The protocol version the session agreed on, set once the handshake is done."""

    @asynccontextmanager
    async def around(self, transport: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
        """``transport``, its streams screened: give this to the SDK's ``Client``."""
        async with transport as (reads, writes):
            yield _ScreenedReads(reads, self), _NotedWrites(writes, self)

    def sent(self, item: Any) -> None:
        """Note ``item``'s id if it asks for a tool listing."""
        message = getattr(item, "message", None)
        if isinstance(message, JSONRPCRequest) and message.method == LIST_TOOLS:
            self._asked.add(message.id)

    def received(self, item: Any) -> Any:
        """``item``, less the tools the SDK would refuse when it answers a listing."""
        if not isinstance(item, SessionMessage):
            return item
        message = item.message
        if not isinstance(message, JSONRPCResponse | JSONRPCError) or message.id not in self._asked:
            return item
        self._asked.discard(message.id)
        if not isinstance(message, JSONRPCResponse):
            return item
        result = message.result
        tools = result.get("tools")
        if not isinstance(tools, list):
            return item  # no list to take apart: the SDK's refusal of it says why
        kept = []
        for tool in tools:
            problem = self._problem({**result, "tools": [tool]})
            if problem is None:
                kept.append(tool)
                continue
            name = tool.get("name") if isinstance(tool, dict) else None
            log.warning(
                "tool %r of MCP server %r is left out: the server listed it wrongly (%s)",
                name if isinstance(name, str) else "(no name)",
                self._server,
                problem,
            )
        if len(kept) == len(tools):
            return item
        screened = message.model_copy(update={"result": {**result, "tools": kept}})
        return SessionMessage(message=screened, metadata=item.metadata)

    def _problem(self, one: dict[str, Any]) -> str | None:
        """What is wrong with the only tool of listing ``one``, if anything."""
        if self.version is not None:
            try:
                validate_server_result(LIST_TOOLS, self.version, one)
            except ValidationError as exc:
                if (problem := _tools_own(exc)) is not None:
                    return problem
            except (KeyError, ValueError):
                pass  # a version the SDK's tables do not hold: the SDK skips this check too
        try:
            ListToolsResult.model_validate(one, by_name=False)
        except ValidationError as exc:
            return _tools_own(exc)
        return None


def _tools_own(exc: ValidationError) -> str | None:
    """The first error of the listed tool itself: the rest of the answer the SDK judges whole."""
    for error in exc.errors(include_url=False):
        if tuple(error["loc"][:2]) == ("tools", 0):
            where = ".".join(str(part) for part in error["loc"][2:]) or "(tool)"
            return f"{where}: {error['msg']}"
    return None


class _NotedWrites:
    """The session's writes, each shown to the screen on its way out."""

    def __init__(self, inner: Any, screen: ToolListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    async def send(self, item: Any, /) -> None:
        self._screen.sent(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _NotedWrites:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _ScreenedReads:
    """The session's reads, each screened on its way in."""

    def __init__(self, inner: Any, screen: ToolListingScreen) -> None:
        self._inner = inner
        self._screen = screen

    @property
    def last_context(self) -> Any:
        # The SDK reads the sender's context variables here when the transport keeps them.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return self._screen.received(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _ScreenedReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _ScreenedReads:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
