"""An MCP server written with the SDK (``MCPServer``, FastMCP's name in mcp 2), for the tests.

``python mcp_notes_server.py`` serves over stdio; ``python mcp_notes_server.py http`` serves
streamable HTTP on a free loopback port, which it prints on its first stdout line.
Its tools: ``echo`` (returns its text), ``add_note``/``list_notes`` (state kept in the
process, so a restart shows), ``crash`` (the process dies mid-call) and ``slow``.
"""

from __future__ import annotations

import os
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")
notes: list[str] = []


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add_note(text: str) -> str:
    """Keep a note; returns how many notes are kept."""
    notes.append(text)
    return f"{len(notes)} note(s)"


@server.tool()
def list_notes() -> str:
    """The notes kept since the server started, one a line."""
    return "\n".join(notes) or "(no notes)"


@server.tool()
def crash() -> str:
    """Stop the server process in the middle of the call."""
    sys.stderr.write("notes server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after ``seconds``."""
    await anyio.sleep(seconds)
    return "done"


def serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    serve_http() if sys.argv[1:] == ["http"] else server.run()
