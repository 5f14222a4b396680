"""An MCP server written with the SDK (``MCPServer``, FastMCP's name in mcp 2), for the tests.

``python mcp_notes_server.py`` serves over stdio; ``python mcp_notes_server.py http`` serves
streamable HTTP on a free loopback port, which it prints on its first stdout line
(``http <address>``: on that address instead).
Its tools: ``echo`` (returns its text), ``add_note``/``list_notes`` (state kept in the
process, so a restart shows), ``forget_notes`` (annotated destructive), ``crash`` (the
process dies mid-call), ``slow``, ``shout`` (megabytes on stderr), ``environment`` (the
names of its environment variables) and ``spawn_sleeper`` (starts a child that outlives
the server). When the file named by ``NOTES_VARIANT_FILE`` says ``v2``, ``echo`` takes
another argument and ``add_note`` is gone: a server that changed its tools when it
restarted.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("notes")
notes: list[str] = []
variant_file = os.environ.get("NOTES_VARIANT_FILE")
V2 = variant_file is not None and Path(variant_file).read_text().strip() == "v2"

if V2:

    @server.tool()
    def echo(text: str, loud: bool) -> str:
        """Return the text, in capitals when loud."""
        return text.upper() if loud else text

else:

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


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def forget_notes() -> str:
    """Drop every note kept."""
    notes.clear()
    return "forgotten"


@server.tool()
def crash() -> str:
    """Stop the server process in the middle of the call."""
    sys.stderr.write("notes server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def shout(megabytes: int) -> str:
    """Write ``megabytes`` of text on stderr, then answer."""
    line = "noise " * 170 + "\n"
    for _ in range(megabytes * 1000):
        sys.stderr.write(line)
    sys.stderr.write("the last words\n")
    sys.stderr.flush()
    return "shouted"


@server.tool()
def environment() -> str:
    """The names of the process's environment variables, one a line."""
    return "\n".join(sorted(os.environ))


@server.tool()
def spawn_sleeper() -> str:
    """Start a child process (same group) that sleeps far longer than the server lives."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    return str(child.pid)


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after ``seconds``."""
    await anyio.sleep(seconds)
    return "done"


def serve_http(address: str) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind((address, 0))
    print(sock.getsockname()[1], flush=True)
    # The SDK checks the Host header against the address it is told it serves.
    app = server.streamable_http_app(host=address)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        serve_http(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1")
    else:
        server.run()
