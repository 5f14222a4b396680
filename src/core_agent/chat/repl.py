"""The chat's loop: read a line, run it as a turn of the session (or a ``/`` command), repeat.

Start-up: the prompt is drawn first; once it is, the settings are read and the kernel built
in a worker thread (``chat_kernel``). A message sent before the kernel is ready waits for it.

A turn is one task of the session (``TaskRequest(session_id=...)``), so it starts from the
conversation so far. The session is made with the first message (its title), and a new one
by ``/new``.

Ctrl-C: while a turn runs, the terminal is not in the editor's hands, so Ctrl-C arrives as
SIGINT, handled here (never as ``KeyboardInterrupt``): it asks the kernel to cancel the
turn's task, which ends ``canceled``, and the chat goes on. While a question is asked or a
line is typed, Ctrl-C is a key (it denies the call, or clears the line). It never ends the
chat: Ctrl-D or ``/exit`` does.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import aclosing, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.to_thread

from core_agent.chat.first_paint import banner, hand_over, shown
from core_agent.chat.line_editor import HISTORY_FILE, DeferredFileHistory, LineEditor

if TYPE_CHECKING:
    from rich.console import Console

    from core_agent.agent_files import AgentDefinition
    from core_agent.chat.approval_prompt import TerminalApprover
    from core_agent.chat.chat_kernel import ChatKernel
    from core_agent.chat.rendering import ToolCallLog, TurnView
    from core_agent.kernel.agent_kernel import AgentKernel
    from shared.agent_protocol import TokenUsage

CANCEL_REASON = "canceled at the terminal (Ctrl-C)"


class _TurnControl:
    """Cancels the running turn's task when Ctrl-C is pressed (once its id is known)."""

    def __init__(self, kernel: AgentKernel, group: anyio.abc.TaskGroup, view: TurnView) -> None:
        self._kernel = kernel
        self._group = group
        self.view = view
        self._task_id: str | None = None
        self._canceling = False

    def started(self, task_id: str) -> None:
        self._task_id = task_id
        if self._canceling:
            self._group.start_soon(self._cancel)

    def interrupt(self) -> None:
        if self._canceling:
            self.view.note("still canceling…")
            return
        self._canceling = True
        self.view.note("canceling the turn…")
        if self._task_id is not None:
            self._group.start_soon(self._cancel)

    async def _cancel(self) -> None:
        from core_agent.contracts.errors import CoreAgentError

        assert self._task_id is not None
        with suppress(CoreAgentError):  # it ended meanwhile
            await self._kernel.cancel_task(self._task_id, CANCEL_REASON)


class ChatRepl:
    """One ``core-agent chat``: its prompt, kernel, session and totals."""

    def __init__(
        self,
        workspace: Path,
        *,
        debug: bool = False,
        painted: bool = False,
        agent: AgentDefinition | None = None,
        trust_agent_file: bool = False,
    ) -> None:
        self.workspace = workspace
        self._agent = agent
        self._trust_agent_file = trust_agent_file
        self._debug = debug
        self._painted = painted
        """Whether the banner and the prompt are on the screen already (``first_paint``)."""
        self._history = DeferredFileHistory()
        self._editor = LineEditor(self._history, self._status)
        self._chat: ChatKernel | None = None
        self._startup_error: BaseException | None = None
        self._ready = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None
        self._turn: _TurnControl | None = None
        self._waiting: anyio.CancelScope | None = None
        self._console: Console | None = None
        self._calls: ToolCallLog | None = None
        self._approver: TerminalApprover | None = None
        self.session_id: str | None = None
        """The session the next turn belongs to; ``None``: a new one, made with it."""
        self._session_usage: TokenUsage | None = None
        self._chat_usage: TokenUsage | None = None

    # What slash commands use.

    @property
    def console(self) -> Console:
        """Where the chat writes (rich, imported on first use)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False)
        return self._console

    @property
    def calls(self) -> ToolCallLog:
        """The chat's tool calls, numbered."""
        if self._calls is None:
            from core_agent.chat.rendering import ToolCallLog

            self._calls = ToolCallLog()
        return self._calls

    @property
    def chat_usage(self) -> TokenUsage:
        """Tokens and cost of every turn of this chat (all its sessions)."""
        from shared.agent_protocol import TokenUsage

        return self._chat_usage or TokenUsage()

    async def ready(self) -> ChatKernel:
        """The kernel, once built (Ctrl-C stops waiting).

        Raises:
            UsageError: Ctrl-C was pressed while waiting.
            Exception: What building it raised.
        """
        if not self._ready.is_set():
            self.console.print("starting… (Ctrl-C stops waiting)", style="dim")
            with self.interruptible() as scope:
                await self._ready.wait()
            if scope.cancelled_caught:
                from core_agent.contracts.errors import UsageError

                raise UsageError("stopped waiting for the start")
        if self._chat is None:
            assert self._startup_error is not None
            raise self._startup_error
        return self._chat

    @contextmanager
    def interruptible(self) -> Iterator[anyio.CancelScope]:
        """A scope Ctrl-C cancels (a wait, a command that calls the model)."""
        with anyio.CancelScope() as scope:
            self._waiting = scope
            try:
                yield scope
            finally:
                self._waiting = None

    async def new_session(self) -> None:
        """The next message starts a new session (and ``AGENTS.md`` is read again)."""
        from core_agent.chat.chat_kernel import with_project_instructions

        self.session_id = None
        self._session_usage = None
        self._chat = with_project_instructions(await self.ready(), self.workspace)
        self._editor.refresh()

    async def resume_session(self, reference: str) -> None:
        """Continue the session ``reference`` names (its id, or a unique start of it).

        Raises:
            UsageError: None or several match, or it is closed.
        """
        from core_agent.chat.slash_commands import transcript_lines
        from core_agent.contracts.errors import UsageError

        kernel = (await self.ready()).kernel
        sessions = await kernel.list_sessions(limit=100_000)
        matches = [s for s in sessions if s.session_id.startswith(reference)]
        exact = [s for s in matches if s.session_id == reference]
        if not matches:
            raise UsageError(f"no session starts with {reference!r} (see /sessions)")
        if len(matches) > 1 and not exact:
            shown = ", ".join(s.session_id[:12] for s in matches[:4])
            raise UsageError(f"{reference!r} is the start of several sessions: {shown}")
        session = (exact or matches)[0]
        if session.closed_at is not None:
            raise UsageError(f"session {session.session_id} is closed: it takes no more turns")
        self.session_id = session.session_id
        transcript = await kernel.session_transcript(session.session_id)
        self.console.print(
            f"resumed session {session.session_id[:12]} ({session.task_count} turns so far)",
            style="green",
        )
        live = [entry for entry in transcript.entries if entry.superseded_by is None]
        for line in transcript_lines(live, last=6):
            self.console.print(f"  {line}", style="dim", markup=False, highlight=False)
        await self._count_session()

    async def switch_model(self, model: str) -> ChatKernel:
        """Build a kernel for ``model`` and use it from the next turn on (same session).

        Raises:
            CoreAgentError: It cannot be built; the current one stays.
        """
        from core_agent.chat.chat_kernel import build_chat_kernel

        current = await self.ready()
        source = current.source_settings or current.settings
        built = await anyio.to_thread.run_sync(
            partial(build_chat_kernel, source, self.workspace, current.agent, model=model)
        )
        await self._enter(built)
        self._chat = built
        await current.kernel.aclose()
        self._editor.refresh()
        return built

    async def session_usage(self) -> tuple[TokenUsage, int]:
        """Tokens and cost of the current session's turns, and how many there are."""
        from shared.agent_protocol import TokenUsage

        if self.session_id is None:
            return TokenUsage(), 0
        tasks = await (await self.ready()).kernel.list_tasks(
            session_id=self.session_id, limit=1_000_000
        )
        total = TokenUsage()
        for task in tasks:
            total = total + task.usage
        return total, len(tasks)

    # The loop.

    async def run(self) -> int:
        """Chat until Ctrl-D or ``/exit``; the exit status.

        Raises:
            Exception: The kernel could not be built (a configuration error, say): the
                caller prints it in one line.
        """
        if self._painted:
            hand_over()
        else:
            print(banner(str(self.workspace)), flush=True)
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as group:
            self._group = group

            def start() -> None:
                group.start_soon(self._start)

            self._editor.on_first_render(start)
            handled = _handle_sigint(loop, self._interrupt)
            failure: Exception | None = None
            try:
                await self._loop()
            except Exception as exc:
                failure = exc  # raised as it is, not inside the task group's ExceptionGroup
            finally:
                if handled:
                    loop.remove_signal_handler(signal.SIGINT)
        if self._chat is not None:
            await self._chat.kernel.aclose()
        if failure is not None:
            raise failure
        return 0

    async def _loop(self) -> None:
        from core_agent.chat.slash_commands import Quit, is_command

        while True:
            line = await self._editor.read()
            if line is None:
                return
            if self._startup_error is not None:
                raise self._startup_error
            if not line.strip():
                continue
            try:
                if is_command(line):
                    await self._command(line.strip())
                else:
                    await self._turn_of(line)
            except Quit:
                return
            except Exception as exc:
                if self._startup_error is not None:
                    raise  # the kernel could not be built: the caller says why, in one line
                self._report(exc)

    async def _command(self, line: str) -> None:
        from core_agent.chat.slash_commands import parse

        command, argument = parse(line)
        await command.run(self, argument)

    async def _turn_of(self, text: str) -> None:
        from core_agent.chat.rendering import TurnView, usage_line
        from shared.agent_protocol import (
            TaskCanceled,
            TaskFailed,
            TaskQueued,
            TaskRequest,
            TaskSucceeded,
        )

        current = await self.ready()
        kernel = current.kernel
        request = TaskRequest(
            task=text,
            session_id=await self._session_for(kernel, text),
            system_prompt=current.system_prompt,
        )
        view = TurnView(self.console, self.calls)
        assert self._group is not None
        self._turn = _TurnControl(kernel, self._group, view)
        usage = None
        try:
            async with aclosing(kernel.stream_task(request)) as events:
                async for event in events:
                    if isinstance(event, TaskQueued):
                        self._turn.started(event.task_id)
                    view.show(event)
                    if isinstance(event, TaskSucceeded | TaskFailed | TaskCanceled):
                        usage = event.usage
        finally:
            view.close()
            self._turn = None
        if usage is not None:
            self._chat_usage = self.chat_usage + usage
            await self._count_session()
            self.console.print(
                usage_line(usage, self._session_usage or usage), style="dim", markup=False
            )

    async def _session_for(self, kernel: AgentKernel, text: str) -> str:
        if self.session_id is None:
            session = await kernel.create_session(
                metadata={
                    "client": "core-agent chat",
                    "workspace": str(self.workspace),
                    "title": " ".join(text.split())[:80],
                }
            )
            self.session_id = session.session_id
            self._editor.refresh()
        return self.session_id

    async def _count_session(self) -> None:
        self._session_usage, _ = await self.session_usage()
        self._editor.refresh()

    async def _start(self) -> None:
        """Read the settings, open the history, build and enter the kernel (in the background)."""
        from core_agent.chat.chat_kernel import build_chat_kernel, read_settings

        def build() -> ChatKernel:
            try:
                settings = read_settings()
                if self._trust_agent_file:
                    settings = settings.model_copy(update={"trust_agent_file": True})
                from core_agent.container import build_redactor

                redact = build_redactor(settings).text
            except BaseException:
                self._history.open(None)
                raise
            self._history.open(settings.data_dir / HISTORY_FILE, redact)
            return build_chat_kernel(settings, self.workspace, self._agent)

        try:
            built = await anyio.to_thread.run_sync(build)
            await self._enter(built)
            self._chat = built
        except Exception as exc:
            self._startup_error = exc
            self._editor.stop(exc)
            return
        finally:
            self._ready.set()
        self._editor.refresh()
        if built.scripted_demo or built.instructions_error:
            await self._editor.above(lambda: self._notices(built))

    def _notices(self, built: ChatKernel) -> None:
        if built.scripted_demo:
            self.console.print(
                "No model is configured: this is the shipped scripted demo, which follows fixed "
                "rules (arithmetic, the time). Set AGENT_MODEL to a litellm model string "
                "(`core-agent run --help`, the README) and start again, or use /model NAME.",
                style="yellow",
                markup=False,
            )
        if built.instructions_error:
            self.console.print(
                f"AGENTS.md was not read: {built.instructions_error}", style="yellow", markup=False
            )

    async def _enter(self, built: ChatKernel) -> None:
        from core_agent.chat.approval_prompt import TerminalApprover

        if self._approver is None:
            self._approver = TerminalApprover(
                self._editor, self.console, before=self._hold, after=self._release
            )
        await built.kernel.__aenter__()
        built.kernel.set_approval_callback(self._approver.ask)
        built.kernel.warm_up_model()  # while the person types the first message

    def _hold(self) -> None:
        if self._turn is not None:
            self._turn.view.hold()

    def _release(self) -> None:
        if self._turn is not None:
            self._turn.view.release()

    def _interrupt(self) -> None:
        if self._turn is not None:
            self._turn.interrupt()
        elif self._waiting is not None:
            self._waiting.cancel()

    def _report(self, exc: BaseException) -> None:
        from core_agent.command_errors import explain

        if self._debug:
            import traceback

            traceback.print_exception(exc)
        line, _ = explain(exc)
        self.console.print(f"error: {line}", style="red", markup=False, highlight=False)

    def _status(self) -> str:
        """The status line under the prompt."""
        parts = [self._chat.model if self._chat is not None else "starting…"]
        parts.append(shown(str(self.workspace)))
        if self._chat is not None and self._chat.instructions is not None:
            parts.append("AGENTS.md")
        parts.append(f"session {self.session_id[:12]}" if self.session_id else "new session")
        usage = self._session_usage
        if usage is not None:
            from core_agent.chat.rendering import money

            parts.append(
                f"{usage.input_tokens + usage.output_tokens:,} tokens · {money(usage.cost_usd)}"
            )
        return " " + " · ".join(parts) + " "


def _handle_sigint(loop: asyncio.AbstractEventLoop, handler: Callable[[], None]) -> bool:
    """SIGINT calls ``handler`` in the loop (where the platform allows it)."""
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
        return False
    return True


def chat_workspace(given: str | None) -> Path:
    """The workspace: ``--workspace`` or the current directory, resolved.

    Raises:
        UsageError: It is not a directory.
    """
    workspace = Path(given or ".").expanduser().resolve()
    if not workspace.is_dir():
        from core_agent.contracts.errors import UsageError

        raise UsageError(f"--workspace: not a directory: {workspace}")
    return workspace


async def run_chat(
    workspace: str | None,
    *,
    debug: bool = False,
    painted: bool = False,
    agent: AgentDefinition | None = None,
    trust_agent_file: bool = False,
) -> int:
    """``core-agent chat`` in ``workspace`` (``--workspace``; this directory when ``None``).

    ``painted``: ``first_paint`` drew the banner and the prompt already. ``agent``: the agent
    file (``--agent``, loaded and checked by the caller), applied with ``trust_agent_file``
    as ``run`` applies it. Returns the exit status.

    Raises:
        UsageError: The workspace is not a directory, or stdin is not a terminal.
        Exception: The kernel could not be built (the caller prints it in one line).
    """
    where = chat_workspace(workspace)
    if not sys.stdin.isatty():
        from core_agent.contracts.errors import UsageError

        raise UsageError(
            "core-agent chat needs a terminal (stdin is not one); for scripts use core-agent run"
        )
    return await ChatRepl(
        where, debug=debug, painted=painted, agent=agent, trust_agent_file=trust_agent_file
    ).run()
