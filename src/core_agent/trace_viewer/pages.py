"""The viewer's pages: the task list, one task, and the requests waiting for a human.

Rendered on the server (Jinja2, autoescaped) from what the stores hold, so they show tasks
run by any process. The pages carry no script: filters and decisions are plain forms, and a
task that is still running refreshes its page itself (``<meta http-equiv="refresh">``).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from core_agent.command_errors import explain
from core_agent.contracts.errors import CorruptStateError, TaskNotFoundError, UsageError
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.safety.terminal_text import printable
from core_agent.task_views import conversation_lines
from core_agent.trace_viewer.access import TOKEN_HEADER, TOKEN_PARAMETER, LocalAccess, tokens_match
from core_agent.trace_viewer.approval_desk import ApprovalDesk
from core_agent.trace_viewer.waterfall import waterfall
from shared.agent_protocol import (
    ApprovalRequest,
    ApprovalRequested,
    ApprovalResolved,
    PolicyDecided,
    TaskEvent,
    TaskStatus,
    ToolCall,
)

PAGE_SIZE = 50
"""Tasks on one page of the list."""
REASON_CHARS = 2000
"""The longest reason a decision may carry (it is shown to the model)."""
REFRESH_S = 2
"""How often the page of a task that is still running reloads itself."""
COUNTED = 100
"""Pending requests counted for the menu at most (it shows "100+" past that)."""

_STATUSES = [status.value for status in TaskStatus]
_ENDED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED})


def viewer_app(kernel: AgentKernel, desk: ApprovalDesk, *, token: str, port: int) -> ASGIApp:
    """The viewer as an ASGI application, behind ``LocalAccess`` (loopback, token, origin)."""
    pages = _Pages(kernel, desk, token)
    app = Starlette(
        routes=[
            Route("/", pages.task_list),
            Route("/tasks/{reference:path}", pages.task),
            Route("/approvals", pages.approvals),
            Route("/approvals/{request_id}", pages.decide, methods=["POST"]),
            Mount(
                "/static",
                StaticFiles(packages=[("core_agent.trace_viewer", "static")]),
                name="static",
            ),
        ],
        exception_handlers={UsageError: pages.refused},
    )
    return LocalAccess(app, token=token, port=port)


class _Pages:
    def __init__(self, kernel: AgentKernel, desk: ApprovalDesk, token: str) -> None:
        self._kernel = kernel
        self._desk = desk
        self._token = token
        self._templates = Environment(
            loader=PackageLoader("core_agent.trace_viewer", "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        # Model and tool text is shown with control and bidi characters made visible, as in
        # the terminal: a call to approve must read as what it is.
        self._templates.filters["shown"] = printable
        self._templates.filters["json"] = lambda value: json.dumps(
            value, indent=2, ensure_ascii=False, default=str
        )
        self._templates.filters["call_arguments"] = _call_arguments
        self._templates.globals.update(link=self.link, token=token, statuses=_STATUSES)

    def link(self, path: str, **params: str | None) -> str:
        """``path`` with ``params`` (the empty ones left out) and the token, as a URL."""
        query = {name: value for name, value in params.items() if value}
        query[TOKEN_PARAMETER] = self._token
        return f"{quote(path)}?{urlencode(query)}"

    async def render(self, name: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
        # Bounded: every page shows the count, and a backlog must not slow them all down.
        waiting = len(await self._kernel.pending_approvals(limit=COUNTED))
        context = {"refresh": None, "error": None, **context}
        count = f"{waiting}+" if waiting >= COUNTED else str(waiting) if waiting else ""
        html = self._templates.get_template(name).render(pending_count=count, **context)
        return HTMLResponse(html, status_code=status_code)

    async def task_list(self, request: Request) -> Response:
        params = request.query_params
        status, session, text = params.get("status"), params.get("session"), params.get("q")
        cursor = params.get("cursor")
        if status and status not in _STATUSES:
            raise UsageError(f"no status {status!r}; one of {', '.join(_STATUSES)}")
        page = await self._kernel.page_tasks(
            status=TaskStatus(status) if status else None,
            session_id=session or None,
            text=text or None,
            cursor=cursor or None,
            limit=PAGE_SIZE,
        )
        return await self.render(
            "tasks.html",
            tasks=page.tasks,
            filters={"status": status, "session": session, "q": text},
            next_cursor=page.next_cursor,
            deeper=cursor is not None,
        )

    async def task(self, request: Request) -> Response:
        task_id = await self._kernel.find_task_id(request.path_params["reference"])
        task = await self._kernel.get_task(task_id)
        try:
            events: list[TaskEvent] = await self._kernel.task_events(task_id)
            unreadable = None
        except CorruptStateError as exc:
            events, unreadable = [], str(exc)
        pending = [r for r in await self._kernel.pending_approvals() if r.task_id == task.task_id]
        notice = self._desk.notice(task.task_id)
        running = task.status not in _ENDED and task.status is not TaskStatus.WAITING_APPROVAL
        return await self.render(
            "task.html",
            task=task,
            waterfall=waterfall(await self._kernel.task_spans(task_id)),
            conversation=conversation_lines(events),
            decisions=[
                e
                for e in events
                if isinstance(e, PolicyDecided | ApprovalRequested | ApprovalResolved)
            ],
            unreadable=unreadable,
            pending=pending,
            notice=notice,
            refresh=REFRESH_S if running or (notice is not None and notice.running) else None,
        )

    async def approvals(self, request: Request) -> Response:
        return await self.render("approvals.html", pending=await self._kernel.pending_approvals())

    async def decide(self, request: Request) -> Response:
        form = await request.form()
        # The token once more, in the form (or a header): a page elsewhere cannot know it.
        given = form.get(TOKEN_PARAMETER) or request.headers.get(TOKEN_HEADER)
        if not tokens_match(given if isinstance(given, str) else None, self._token):
            return Response("refused: the form does not carry the viewer's token", 403)
        answer, reason = form.get("decision"), form.get("reason", "")
        if answer not in ("approve", "deny") or not isinstance(reason, str):
            raise UsageError("a decision is `approve` or `deny`, with an optional reason")
        if len(reason) > REASON_CHARS:
            raise UsageError(f"the reason is longer than {REASON_CHARS} characters")
        request_id = request.path_params["request_id"]
        waiting = await self._kernel.pending_approvals()
        found: ApprovalRequest | None = next(
            (r for r in waiting if r.request_id == request_id), None
        )
        if found is None:
            return await self.render(
                "approvals.html",
                status_code=409,
                pending=waiting,
                error=f"request {request_id} no longer waits for a decision (it was decided, "
                "or its task ended)",
            )
        notice = await self._desk.decide(found, approved=answer == "approve", reason=reason)
        if notice.error is not None:
            return await self.render(
                "approvals.html",
                status_code=409,
                pending=await self._kernel.pending_approvals(),
                error=notice.error,
            )
        return RedirectResponse(self.link(f"/tasks/{found.task_id}"), status_code=303)

    async def refused(self, request: Request, exc: Exception) -> Response:
        line, _ = explain(exc)
        status_code = 404 if isinstance(exc, TaskNotFoundError) else 400
        return await self.render("problem.html", status_code=status_code, problem=line)


def _call_arguments(call: ToolCall) -> str:
    """A call's arguments as indented JSON, or as the model sent them if they were not JSON."""
    if call.arguments is not None:
        return json.dumps(call.arguments, indent=2, ensure_ascii=False)
    return call.raw_arguments or ""
