"""The inline approval question: a risky call is shown with why it needs a yes, and answered.

Answers: ``y`` this call once; ``t`` this call and the same call again in this turn (scope
``task``); ``s`` the same for the rest of the session; ``n`` deny (then an optional reason,
which the model is told). "The same call" is the same tool with the same arguments (for a
command, the same line): another command, even of the same program, is asked about, and so is
the same call once the policy grades it higher or untrusted content entered the turn after the
answer (``safety.approvals``). Enter alone, Ctrl-C or Ctrl-D deny: refusing is the safe
default, and Ctrl-C here denies this call only, the turn goes on and the model hears why. A
question about a stuck task (no tool call) is answered yes (with guidance for the task) or no.

Calls of one turn that need approval at the same time are asked one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import anyio
from rich.console import Console

from core_agent.chat.line_editor import LineEditor
from core_agent.chat.rendering import arguments_text
from core_agent.safety.terminal_text import printable
from shared.agent_protocol import ApprovalDecision, ApprovalRequest

Scope = Literal["once", "task", "session"]
SCOPES: dict[str, Scope] = {"y": "once", "yes": "once", "t": "task", "s": "session"}
DENIALS = frozenset({"", "n", "no"})
SCOPE_WORDS: dict[Scope, str] = {
    "once": "once",
    "task": "for the same call this turn",
    "session": "for the same call this session",
}
QUESTION = "approve? [y] once · [t] same call this turn · [s] same call this session · [N] deny › "
DECIDED_BY = "core-agent chat"


class TerminalApprover:
    """Asks the person about the chat's risky calls.

    ``ask`` is the kernel's approval callback; it is async, so it waits in the event loop,
    where the line editor runs.

    ``before`` runs before a question is asked (the turn's view stops drawing and holds its
    events), ``after`` once it is answered.
    """

    def __init__(
        self,
        editor: LineEditor,
        console: Console,
        *,
        before: Callable[[], None] = lambda: None,
        after: Callable[[], None] = lambda: None,
    ) -> None:
        self._editor = editor
        self._console = console
        self._before = before
        self._after = after
        self._lock = anyio.Lock()

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask the person at the terminal about ``request``; their decision."""
        async with self._lock:
            self._before()
            try:
                return await self._ask(request)
            finally:
                self._after()

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        self._show(request)
        if request.tool_call is None:
            return await self._ask_question(request)
        while True:
            answer = await self._answer(QUESTION)
            if answer is None or answer in DENIALS:
                reason = (
                    await self._answer("why not? (optional) › ", choice=False) if answer else ""
                )
                return self._denied(request, reason or "")
            scope = SCOPES.get(answer)
            if scope is not None:
                self._console.print(f"✓ approved {SCOPE_WORDS[scope]}", style="green")
                return ApprovalDecision(
                    request_id=request.request_id,
                    approved=True,
                    scope=scope,
                    reason=f"approved at the terminal ({SCOPE_WORDS[scope]})",
                    decided_by=DECIDED_BY,
                )
            self._console.print("answer y, t, s or n", style="yellow")

    async def _ask_question(self, request: ApprovalRequest) -> ApprovalDecision:
        answer = await self._answer("carry on? [y] yes · [N] no, end the turn › ")
        if answer in ("y", "yes"):
            guidance = await self._answer("guidance for the task (optional) › ", choice=False)
            self._console.print("✓ carrying on", style="green")
            return ApprovalDecision(
                request_id=request.request_id,
                approved=True,
                reason=guidance or "",
                decided_by=DECIDED_BY,
            )
        return self._denied(request, "")

    def _denied(self, request: ApprovalRequest, reason: str) -> ApprovalDecision:
        self._console.print("✗ denied", style="red")
        return ApprovalDecision(
            request_id=request.request_id,
            approved=False,
            reason=reason or "denied at the terminal",
            decided_by=DECIDED_BY,
        )

    async def _answer(self, question: str, *, choice: bool = True) -> str | None:
        """The answer, trimmed (lower-cased for a ``choice``); ``None`` for Ctrl-C or Ctrl-D."""
        try:
            answer = (await self._editor.ask(question)).strip()
        except (KeyboardInterrupt, EOFError):
            return None
        return answer.lower() if choice else answer

    def _show(self, request: ApprovalRequest) -> None:
        console = self._console
        rule = f" · rule {request.rule}" if request.rule else ""
        console.print(
            f"approval needed · {request.risk.value} risk{rule}", style="bold yellow", markup=False
        )
        call = request.tool_call
        if call is not None:
            shown = printable(f"{call.name} {arguments_text(call, indent=2)}")
            console.print(f"  {shown}", markup=False, highlight=False)
        why = request.reason or request.question
        if why:
            console.print(f"  why: {printable(why)}", style="dim", markup=False)
