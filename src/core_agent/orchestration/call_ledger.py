"""The tool-call ledger as one reason-act loop uses it.

Each call gets an idempotency key from the task, the loop's checkpoint key, the run (a fresh
run of the task gets a new one; a resumed run keeps it), the position of the model's message
in the conversation and the call's id, so the same call of the same conversation has the same
key in every process that resumes it, and a later turn's call never has an earlier one's key
(model call ids need not be unique). Before a tool
acts its intent is written; after, its result. A resumed loop finds what the ledger knows:

* a finished call is answered with its recorded result and not run again;
* a call that started and left no result may or may not have acted: it runs again only when
  that is harmless (an idempotent tool, or a command proven read-only that its sandbox keeps
  read-only and offline), else a human decides (``ToolCallGate.confirm_rerun``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core_agent.contracts.tool import Capability, ITool, ToolContext
from core_agent.contracts.tool_call_ledger import IToolCallLedger, LedgerEntry, LedgerStatus
from shared.agent_protocol import ToolCall, ToolResult

_CONFINED_ONLY = frozenset({Capability.READ, Capability.EXEC})


class LedgeredCalls:
    """The ledger entries of one loop run: keys, what a resumed run already knows."""

    def __init__(
        self,
        ledger: IToolCallLedger,
        *,
        task_id: str,
        scope: str,
        run_id: str,
        known: Mapping[str, LedgerEntry] | None = None,
    ) -> None:
        self._ledger = ledger
        self._task_id = task_id
        self._scope = scope
        self._run_id = run_id
        self._known = dict(known or {})
        self.turn = 0
        """Position of the model message whose calls run now (set by the loop)."""

    @classmethod
    async def open(
        cls, ledger: IToolCallLedger, *, task_id: str, scope: str, run_id: str, resuming: bool
    ) -> LedgeredCalls:
        """The loop's view of the ledger; a resuming loop reads what the task recorded."""
        known = {e.idempotency_key: e for e in await ledger.entries(task_id)} if resuming else {}
        return cls(ledger, task_id=task_id, scope=scope, run_id=run_id, known=known)

    def key(self, call: ToolCall) -> str:
        """The call's idempotency key (stable across resumes of this run)."""
        material = "\0".join((self._task_id, self._scope, self._run_id, str(self.turn), call.id))
        return hashlib.sha256(material.encode()).hexdigest()[:32]

    def recorded(self, call: ToolCall) -> LedgerEntry | None:
        """What an earlier process recorded for this call, if anything."""
        return self._known.get(self.key(call))

    @staticmethod
    def reruns_safely(tool: ITool, arguments: Mapping[str, Any], context: ToolContext) -> bool:
        """Whether running the call once more has no effect beyond running it once.

        An idempotent tool, one that resumes its first invocation (``ToolSpec.resumable``),
        or a tool that only reads and runs confined commands when its own
        check proves the call read-only: the sandbox then keeps it from writing or reaching
        the network, so it can have done nothing that a second run would repeat.
        """
        spec = tool.spec
        if spec.idempotent or spec.resumable:
            return True
        if not spec.capabilities <= _CONFINED_ONLY or Capability.EXEC not in spec.capabilities:
            return False
        assessment = tool.assess(arguments, context)
        return assessment.refusal is None and not assessment.unproven and not assessment.writes

    async def begin(
        self, call: ToolCall, tool: ITool, arguments: Mapping[str, Any], *, idempotent: bool
    ) -> str:
        """Record the intent (committed before the tool acts); returns the key."""
        key = self.key(call)
        entry = LedgerEntry(
            idempotency_key=key,
            task_id=self._task_id,
            call_id=call.id,
            tool=tool.spec.name,
            arguments=json.dumps(arguments, sort_keys=True, default=str),
            idempotent=idempotent,
            status="started",
            started_at=datetime.now(UTC),
        )
        await self._ledger.begin(entry)
        return key

    async def finish(
        self, key: str, result: ToolResult, *, status: LedgerStatus = "finished", note: str = ""
    ) -> None:
        """Record how the call ended."""
        await self._ledger.finish(key, result, status=status, note=note or None)
        known = self._known.get(key)
        if known is not None:
            self._known.pop(key)
