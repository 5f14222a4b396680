"""Approval bookkeeping: what exactly was approved, and for how long it stands.

An approval is bound to a hash of the exact call (tool name and canonical JSON arguments); a
decision scoped wider than ``once`` becomes a grant that covers later calls in the same task,
the same session, or matching a pattern, until it expires. A pattern grant holds in the
session it was given in unless the human chose every session, and for a command it covers a
line only when *each* of its sub-commands matches, it writes no file through a redirection and
the parser can read all of it (no assignment, expansion or substitution): a grant for
``git rev-parse*`` does not cover ``git rev-parse HEAD; git branch -D x`` nor
``GIT_CONFIG_COUNT=1 ... git rev-parse``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core_agent.contracts.shell_parser import IShellParser
from core_agent.safety.policy_engine import COMMAND_ARGUMENTS
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
    all_sessions: bool = False


class ApprovalGrants:
    """Grants from decisions scoped ``task``, ``session`` or ``pattern``, with expiry.

    In memory and per kernel: a restart forgets them, which only means asking again.
    """

    def __init__(self, shell_parser: IShellParser | None = None) -> None:
        self._grants: list[Grant] = []
        self._parser = shell_parser

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
                all_sessions=decision.pattern_scope == "all_sessions",
            )
        )

    def covering(
        self, *, task_id: str, session_id: str, tool: str, arguments: Mapping[str, Any]
    ) -> Grant | None:
        """A live grant that covers this call, if any."""
        now = datetime.now(UTC)
        self._grants = [g for g in self._grants if g.expires_at is None or g.expires_at > now]
        for grant in self._grants:
            if grant.scope == "task" and grant.task_id == task_id and grant.tool == tool:
                return grant
            if grant.scope == "session" and grant.session_id == session_id and grant.tool == tool:
                return grant
            if grant.scope != "pattern" or not grant.pattern:
                continue
            if not grant.all_sessions and grant.session_id != session_id:
                continue
            if self._pattern_covers(grant.pattern, tool, arguments):
                return grant
        return None

    def _pattern_covers(self, pattern: str, tool: str, arguments: Mapping[str, Any]) -> bool:
        commands = [
            value
            for name, value in arguments.items()
            if name.lower() in COMMAND_ARGUMENTS and isinstance(value, str)
        ]
        if not commands:
            return fnmatch.fnmatchcase(canonical_call(tool, arguments), pattern)
        if self._parser is None:
            return False  # nobody can split the line: a pattern cannot vouch for it
        for command in commands:
            parsed = self._parser.parse(command)
            if not parsed.ok or not parsed.commands or parsed.unproven:
                # Assignments (GIT_CONFIG_*, LD_PRELOAD), expansions and substitutions run
                # more than the words the pattern was matched against.
                return False
            if any(r.writes and r.target != "/dev/null" for r in parsed.redirections):
                return False
            if not all(fnmatch.fnmatchcase(" ".join(c.argv), pattern) for c in parsed.commands):
                return False
        return True
