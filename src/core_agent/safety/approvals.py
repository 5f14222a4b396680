"""Approval bookkeeping: what exactly was approved, and for how long it stands.

An approval is bound to a hash of the exact call (tool name and canonical JSON arguments); a
decision scoped wider than ``once`` becomes a grant that covers later calls in the same task,
the same session, or matching a pattern, until it expires.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.agent_protocol import ApprovalDecision


def canonical_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """``tool`` and its arguments as one stable string (sorted keys, no spaces)."""
    encoded = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return f"{tool} {encoded}"


def call_hash(tool: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 of ``canonical_call``: what an approval is bound to."""
    return hashlib.sha256(canonical_call(tool, arguments).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Grant:
    """A standing approval from a scoped decision."""

    scope: str
    task_id: str
    session_id: str
    tool: str
    pattern: str | None
    expires_at: datetime | None
    request_id: str


class ApprovalGrants:
    """Grants from decisions scoped ``task``, ``session`` or ``pattern``, with expiry.

    In memory and per kernel: a restart forgets them, which only means asking again.
    """

    def __init__(self) -> None:
        self._grants: list[Grant] = []

    def add(self, decision: ApprovalDecision, *, task_id: str, session_id: str, tool: str) -> None:
        """Remember an approving decision whose scope reaches beyond this call."""
        if not decision.approved or decision.scope == "once":
            return
        self._grants.append(
            Grant(
                scope=decision.scope,
                task_id=task_id,
                session_id=session_id,
                tool=tool,
                pattern=decision.pattern,
                expires_at=decision.expires_at,
                request_id=decision.request_id,
            )
        )

    def covering(
        self, *, task_id: str, session_id: str, tool: str, arguments: Mapping[str, Any]
    ) -> Grant | None:
        """A live grant that covers this call, if any."""
        now = datetime.now(UTC)
        self._grants = [g for g in self._grants if g.expires_at is None or g.expires_at > now]
        text = canonical_call(tool, arguments)
        for grant in self._grants:
            if grant.scope == "task" and grant.task_id == task_id and grant.tool == tool:
                return grant
            if grant.scope == "session" and grant.session_id == session_id and grant.tool == tool:
                return grant
            if (
                grant.scope == "pattern"
                and grant.pattern
                and fnmatch.fnmatchcase(text, grant.pattern)
            ):
                return grant
        return None
