"""The stdio server as a process: its standard streams taken for the protocol, its signals.

Nothing but protocol messages may reach the host on stdout, whoever writes: the protocol
gets its own copies of descriptors 0 and 1, descriptor 1 then points at stderr (a stray
``print``, a library's banner, a C extension's output all land there) and descriptor 0 at
``/dev/null`` (nothing else can consume the host's requests). Child processes inherit those
harmless ones; the protocol's copies are not inherited.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.stdio_server.server import DEFAULT_DRAIN_S, DEFAULT_MAX_MESSAGE_BYTES, StdioServer


def claim_stdio() -> tuple[int, int]:
    """Take the process's stdin and stdout for the protocol; their new descriptors."""
    sys.stdout.flush()
    protocol_in, protocol_out = os.dup(0), os.dup(1)  # not inheritable (PEP 446)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return protocol_in, protocol_out


async def serve_stdio(
    kernel: AgentKernel,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    drain_s: float = DEFAULT_DRAIN_S,
) -> None:
    """Serve ``kernel`` on this process's stdin and stdout until the host closes stdin.

    SIGTERM and SIGINT shut down as the end of input does, without waiting for runs: they
    are left for recovery at once (see ``server``). The kernel is entered here and closed
    when the server is done.
    """
    protocol_in, protocol_out = claim_stdio()
    server = StdioServer(
        kernel,
        input_fd=protocol_in,
        output_fd=protocol_out,
        max_message_bytes=max_message_bytes,
        drain_s=drain_s,
    )
    async with kernel, anyio.create_task_group() as group:
        if sys.platform != "win32":
            group.start_soon(_stop_on_signals, server)
        await server.serve()
        group.cancel_scope.cancel()


async def _stop_on_signals(server: StdioServer) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            server.stop(drain=False)
