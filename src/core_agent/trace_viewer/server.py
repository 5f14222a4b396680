"""``core-agent ui``: the viewer served on 127.0.0.1, at a URL with a fresh random token.

The socket is bound here (loopback only, never another address) before uvicorn serves on
it, so the URL printed names the real port, also for ``--port 0`` (any free one). The kernel
lives as long as the server: decisions given on the pages resume their tasks in it, and on
the way out those runs are left for recovery rather than canceled.

The URL is printed to the user's terminal but never put on a command line: a process's
arguments are readable by every local user (``ps``), and whoever holds the token may decide
the approvals. The browser is given a page only this user can read, which sends it on to the
URL (as Jupyter does).
"""

from __future__ import annotations

import contextlib
import errno
import html
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import webbrowser
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import uvicorn

from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.private_files import create_private_file, make_private_folder
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.trace_viewer.approval_desk import ApprovalDesk
from core_agent.trace_viewer.pages import viewer_app

HOST = "127.0.0.1"


def listen(port: int) -> socket.socket:
    """A socket listening on ``HOST``:``port`` (any free port for 0).

    Raises:
        UsageError: The port is taken, or not one this user may use.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Inherited by every accepted connection: a response written in two parts (head,
        # then body) is not held back 40 ms for the first part's acknowledgement.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((HOST, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
        raise UsageError(
            f"port {port} on {HOST} {why}: choose another with --port, or --port 0 for any free one"
        ) from None
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by ``_stop_on_signals`` rather than its own handlers.

    Its own handlers raise the signal again once it has stopped, which would end the process
    (SIGTERM) before the kernel closes its stores and leaves its runs for recovery.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install nothing: ``_stop_on_signals`` does."""
        yield


async def _stop_on_signals(
    server: uvicorn.Server, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    """The first Ctrl-C or SIGTERM stops the server gracefully; a second one at once."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if server.should_exit:
                server.force_exit = True
            server.should_exit = True


REDIRECT_PAGE = "viewer.html"
_REDIRECT_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={url}">
<title>core-agent ui</title></head>
<body><p><a href="{url}">Open the core-agent trace viewer</a></p></body></html>
"""


def _tell(message: str) -> None:
    print(f"core-agent ui: {message}", file=sys.stderr, flush=True)


def write_redirect_page(url: str, runtime_dir: Path | None) -> Path:
    """A page sending a browser to ``url``, alone in a new folder only this user can enter.

    The folder (0700) is made in ``runtime_dir`` (created 0700 when missing), or in the
    system's temporary folder for ``None``; the page is 0600. Remove the folder with
    ``remove_redirect_page``.

    Raises:
        OSError: The folder or the page cannot be written.
        ConfigurationError: ``runtime_dir`` is another user's or others may write to it
            (``contracts.private_files``).
    """
    if runtime_dir is not None:
        make_private_folder(runtime_dir, what="runtime folder")
    # mkdtemp makes its folder 0700 whatever the umask, and never one that was there.
    folder = Path(tempfile.mkdtemp(prefix=f"ui-{os.getpid()}-", dir=runtime_dir))
    page = folder / REDIRECT_PAGE
    try:
        create_private_file(page, _REDIRECT_HTML.format(url=html.escape(url)).encode())
    except OSError:
        remove_redirect_page(page)
        raise
    return page


def remove_redirect_page(page: Path) -> None:
    """Remove the page ``write_redirect_page`` made, and its folder."""
    shutil.rmtree(page.parent, ignore_errors=True)


def _start_browser(page: Path) -> bool:
    try:
        return webbrowser.open(page.as_uri())
    except webbrowser.Error:
        return False


async def _browser_started(page: Path) -> bool:
    """Whether a browser could be started on ``page``.

    In a thread of its own, not a worker's: a browser named by ``BROWSER`` is waited for
    until it exits, and a worker thread would hold the viewer's process until then after
    the viewer stopped; a daemon thread ends with it.
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    started: list[bool] = []

    def report(opened: bool) -> None:
        started.append(opened)
        done.set()

    def start() -> None:
        opened = _start_browser(page)
        with contextlib.suppress(RuntimeError):  # the viewer has stopped meanwhile
            anyio.from_thread.run_sync(report, opened, token=token)

    threading.Thread(target=start, name="core-agent ui browser", daemon=True).start()
    await done.wait()
    return started[0]


async def _open_browser(url: str, runtime_dir: Path | None) -> None:
    """Open ``url`` in the user's browser by way of a private redirect page.

    The page stays until the viewer stops (this task is canceled): the browser may read it
    only once it has started.
    """
    try:
        # Not in a thread: a cancel while one wrote it would leave the page behind.
        page = write_redirect_page(url, runtime_dir)
    except OSError as exc:
        _tell(f"cannot start a browser ({exc.strerror or exc}); open the URL above yourself")
        return
    except ConfigurationError as exc:
        # The runtime folder is another user's or open to others: no page goes in there.
        _tell(f"cannot start a browser: {exc}; open the URL above yourself")
        return
    try:
        if not await _browser_started(page):
            _tell("no browser could be started; open the URL above yourself")
            return
        await anyio.sleep_forever()
    finally:
        remove_redirect_page(page)


async def serve_viewer(
    make_kernel: Callable[[], AgentKernel],
    *,
    port: int = 0,
    open_browser: bool = True,
    runtime_dir: Path | None = None,
) -> None:
    """Serve the viewer until Ctrl-C or SIGTERM, printing its URL on stdout; then return.

    ``make_kernel`` is called once the port is held (a port in use is told before the kernel
    opens its stores); the viewer closes the kernel when it stops. With ``open_browser``, the
    browser is started on a redirect page written under ``runtime_dir`` (the system's
    temporary folder for ``None``) and removed when the viewer stops.

    Raises:
        UsageError: ``port`` cannot be listened on.
    """
    token = secrets.token_urlsafe(24)
    sock = listen(port)
    bound = sock.getsockname()[1]
    url = f"http://{HOST}:{bound}/?token={token}"
    try:
        async with make_kernel() as kernel, anyio.create_task_group() as group:
            app = viewer_app(kernel, ApprovalDesk(kernel, group), token=token, port=bound)
            server = _Server(
                uvicorn.Config(
                    app,
                    log_level="warning",
                    access_log=False,
                    lifespan="off",
                    server_header=False,
                    timeout_graceful_shutdown=5,
                )
            )
            await group.start(_stop_on_signals, server)
            print(url, flush=True)
            print(
                "core-agent ui: the trace viewer is at the URL above (this machine only; the "
                "token is its key). Ctrl-C stops it.",
                file=sys.stderr,
                flush=True,
            )
            if open_browser:
                group.start_soon(_open_browser, url, runtime_dir)
            try:
                await server.serve(sockets=[sock])
            finally:
                kernel.leave_runs()
                group.cancel_scope.cancel()
    finally:
        sock.close()
