"""``core-agent serve --stdio``: the kernel served to another program over stdin and stdout.

JSON-RPC 2.0, one message a line, with ``shared.agent_protocol``'s messages (``rpc``):
``server`` answers requests and sends notifications, ``line_channel`` reads and writes the
lines, ``process`` claims the process's standard streams and signals, ``stderr_log`` keeps
logging from waiting for a host that does not read stderr.

The dispatcher is written here, on anyio and pydantic, rather than taken from a JSON-RPC
library: those looked at frame messages otherwise (python-lsp-jsonrpc: LSP's
``Content-Length`` headers), check params against Python signatures rather than the
protocol's models and answer each request when its method returns (jsonrpcserver), or bring
their own protocol's handshake (the ``mcp`` SDK's sessions). What is needed here (a response
sent at the moment a task is stored, ids in flight, bounded lines) is a small part of the code.
"""

from core_agent.stdio_server.process import check_workspace, claim_stdio, serve_stdio
from core_agent.stdio_server.server import (
    DEFAULT_DRAIN_S,
    DEFAULT_MAX_MESSAGE_BYTES,
    ServerLimits,
    StdioServer,
)

__all__ = [
    "DEFAULT_DRAIN_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "ServerLimits",
    "StdioServer",
    "check_workspace",
    "claim_stdio",
    "serve_stdio",
]
