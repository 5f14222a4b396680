"""``core-agent serve --stdio``: the kernel served to another program over stdin and stdout.

JSON-RPC 2.0, one message a line, with ``shared.agent_protocol``'s messages (``rpc``):
``server`` answers requests and sends notifications, ``line_channel`` reads and writes the
lines, ``process`` claims the process's standard streams and signals.
"""

from core_agent.stdio_server.process import claim_stdio, serve_stdio
from core_agent.stdio_server.server import DEFAULT_DRAIN_S, DEFAULT_MAX_MESSAGE_BYTES, StdioServer

__all__ = [
    "DEFAULT_DRAIN_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "StdioServer",
    "claim_stdio",
    "serve_stdio",
]
