"""The stdio server as a process: its standard streams taken for the protocol, its signals.

Nothing but protocol messages may reach the host on stdout, whoever writes: the protocol
gets its own copies of descriptors 0 and 1, descriptor 1 then points at stderr (a stray
``print``, a library's banner, a C extension's output all land there) and descriptor 0 at
``/dev/null`` (nothing else can consume the host's requests). Child processes inherit those
harmless ones; the protocol's copies are not inherited. This happens before the kernel is
built, so a plugin that prints as it is imported cannot corrupt the protocol either.

Logging goes to stderr through a bounded queue and a thread of its own (``stderr_log``): a
host that never reads stderr cannot freeze the server.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.stdio_server.server import DEFAULT_DRAIN_S, ServerLimits, StdioServer
from core_agent.stdio_server.stderr_log import logging_off_the_event_loop


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


def check_workspace(settings: AgentSettings, cwd: Path | None = None) -> None:
    """Refuse to serve with the home directory or ``/`` as the tools' workspace.

    With ``AGENT_WORKSPACE_ROOTS`` unset, file tools and commands work in the current
    directory. A person running ``core-agent run`` chose it; a server inherits it from the
    program that starts it, and a desktop app is often started in the home directory (where
    a write to ``.bashrc`` would be a mere workspace write) or in ``/``.

    Raises:
        UsageError: No roots are configured and the current directory is ``/``, the home
            directory or one of its parents.
    """
    if settings.workspace_roots:
        return
    here = (cwd or Path.cwd()).resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = Path(here.anchor)
    if here == Path(here.anchor) or here == home or here in home.parents:
        raise UsageError(
            f"no workspace: AGENT_WORKSPACE_ROOTS is unset and the current directory is "
            f"{here}, which the server will not give its tools; set AGENT_WORKSPACE_ROOTS "
            "to the directories tools may work in (a request's workspace_roots sets them "
            "per task), or start the server in its workspace"
        )


async def serve_stdio(
    kernel: AgentKernel | Callable[[], AgentKernel],
    *,
    limits: ServerLimits | None = None,
    drain_s: float = DEFAULT_DRAIN_S,
) -> None:
    """Serve ``kernel`` on this process's stdin and stdout until the host closes stdin.

    ``kernel`` may be the function that builds it: it is called once the streams are taken
    and logging no longer waits for stderr, so nothing that building it imports (a plugin,
    a provider) can write to the protocol or block on stderr.

    SIGTERM and SIGINT shut down as the end of input does, without waiting for runs: they
    are left for recovery at once (see ``server``). The kernel is entered here and closed
    when the server is done.
    """
    protocol_in, protocol_out = claim_stdio()
    with logging_off_the_event_loop():
        if not isinstance(kernel, AgentKernel):
            kernel = kernel()
        server = StdioServer(
            kernel, input_fd=protocol_in, output_fd=protocol_out, limits=limits, drain_s=drain_s
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
