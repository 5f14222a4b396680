"""Approval bookkeeping: what exactly was approved, and for how long it stands.

An approval is bound to a hash of the exact call (tool name and canonical JSON arguments); a
decision scoped wider than ``once`` becomes a grant that lets later calls run without asking.
What a grant covers, by scope:

- ``task``: a later call in the same task that is the *same call*: the same tool with the same
  arguments (the same ``call_hash``; for a command, the same line, byte for byte, and the same
  other arguments, a timeout too). Another command, even of the same program, is asked about:
  a family of calls is approved only by a pattern the human wrote, never inferred.
- ``session``: the same call in any task of the same session.
- ``pattern``: a call matching the human's pattern, in the session it was given in unless the
  human chose every session: the canonical call (``tool {"json"...}``) for most tools, each
  sub-command of the line for a command of the tool it was given for. It covers a line only
  when *each* of its
  sub-commands matches, it writes no file through a redirection and the parser can read all of
  it (no assignment, expansion or substitution): a grant for ``git rev-parse*`` does not cover
  ``git rev-parse HEAD; git branch -D x`` nor ``GIT_CONFIG_COUNT=1 ... git rev-parse``.

Every scope has the same two limits, because the human judged one call in one context: a grant
never covers a call the policy grades above the approved call's risk (a pattern cannot stretch
a ``high`` approval over a ``critical`` line), and a grant given while the task was untainted
never covers a call graded while untrusted content is in the task (an instruction injected
after the human answered must not ride on that answer, even to repeat the call). A denied call
never reaches the grants: the policy's refusal comes first.
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
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, RiskLevel


def canonical_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """``tool`` and its arguments as one stable string (sorted keys, no spaces)."""
    encoded = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return f"{tool} {encoded}"


def call_hash(tool: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 of ``canonical_call``: what an approval is bound to."""
    return hashlib.sha256(canonical_call(tool, arguments).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Grant:
    """A standing approval from a scoped decision.

    ``call_hash``, ``risk`` and ``tainted`` describe the approved call as the human saw it:
    the call a ``task`` or ``session`` grant repeats, the highest risk any grant covers, and
    whether untrusted content was already in the task when it was judged.
    """

    scope: str
    task_id: str
    session_id: str
    tool: str
    pattern: str | None
    expires_at: datetime | None
    request_id: str
    call_hash: str
    risk: RiskLevel
    tainted: bool
    all_sessions: bool = False


class ApprovalGrants:
    """Grants from decisions scoped ``task``, ``session`` or ``pattern``, with expiry.

    In memory and per kernel: a restart forgets them, which only means asking again (a
    decision recorded on a suspended call becomes a grant again when the call resumes).
    """

    def __init__(self, shell_parser: IShellParser | None = None) -> None:
        self._grants: list[Grant] = []
        self._parser = shell_parser

    def add(self, decision: ApprovalDecision, request: ApprovalRequest, *, tainted: bool) -> None:
        """Remember an approving decision on ``request`` whose scope reaches beyond this call.

        ``tainted``: whether untrusted content was in the task when the approved call was
        judged (the request does not say; the gate does).
        """
        call = request.tool_call
        if not decision.approved or decision.scope == "once" or call is None:
            return
        if request.call_hash is None:
            return  # nothing binds the decision to a call: it cannot stand for later ones
        self._grants.append(
            Grant(
                scope=decision.scope,
                task_id=request.task_id,
                session_id=request.session_id,
                tool=call.name,
                pattern=decision.pattern,
                expires_at=decision.expires_at,
                request_id=decision.request_id,
                call_hash=request.call_hash,
                risk=request.risk,
                tainted=tainted,
                all_sessions=decision.pattern_scope == "all_sessions",
            )
        )

    def covering(
        self,
        *,
        task_id: str,
        session_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        risk: RiskLevel,
        tainted: bool,
    ) -> Grant | None:
        """A live grant that covers this call, if any.

        ``risk`` and ``tainted`` are the policy's decision on this call; the caller has
        already refused it if the policy denied it.
        """
        now = datetime.now(UTC)
        self._grants = [g for g in self._grants if g.expires_at is None or g.expires_at > now]
        this_call = call_hash(tool, arguments)
        for grant in self._grants:
            if not grant.risk.at_least(risk) or (tainted and not grant.tainted):
                continue
            if grant.scope == "task" and grant.task_id != task_id:
                continue
            if grant.scope in ("task", "session"):
                # The hash names the tool too: the same call, not the same tool.
                if grant.session_id == session_id and grant.call_hash == this_call:
                    return grant
                continue
            if grant.scope != "pattern" or not grant.pattern:
                continue
            if not grant.all_sessions and grant.session_id != session_id:
                continue
            if self._pattern_covers(grant, tool, arguments):
                return grant
        return None

    def _pattern_covers(self, grant: Grant, tool: str, arguments: Mapping[str, Any]) -> bool:
        pattern = grant.pattern or ""
        if tool != grant.tool:
            # A pattern stands for calls of the tool it was approved on: ``git status*``
            # approved for the local shell says nothing about another tool that runs
            # commands, and ``http*`` approved for a command not about ``http_fetch``.
            return False
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
