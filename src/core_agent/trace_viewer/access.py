"""Who may use the viewer: this machine's browser, holding the token the command printed.

The viewer shows everything the agent did (prompts, tool arguments, answers) and can approve
a risky call, so a page elsewhere on the web must neither read it nor act through it. Every
request must come from loopback, name this viewer's address in ``Host`` (a DNS-rebinding page
names its own domain), carry the token (``?token=`` or the ``X-Core-Agent-Token`` header),
and, when a browser says where it comes from (``Origin``, ``Sec-Fetch-Site``), come from this
viewer's own pages. A decision (a POST) must carry the token once more, in its form or the
header (``pages``), which a page on another site cannot read to put there.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_HEADER = "x-core-agent-token"
TOKEN_PARAMETER = "token"
DEFAULT_HTTP_PORT = 80

SECURITY_HEADERS = {
    # Nothing is loaded from anywhere but the viewer itself, nothing runs (no script), and no
    # other site may frame it.
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    # The token is in the URL: never sent to another origin (there are no links to one).
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

_SAFE_METHODS = frozenset({"GET", "HEAD"})


def tokens_match(given: str | None, token: str) -> bool:
    """Whether ``given`` is the token, compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class LocalAccess:
    """ASGI middleware that refuses (403) every request but this viewer's own.

    ``port`` is the port the viewer listens on (on 127.0.0.1); ``token`` the secret of its
    URL. Every response gets ``SECURITY_HEADERS``.
    """

    def __init__(self, app: ASGIApp, *, token: str, port: int) -> None:
        self._app = app
        self._token = token
        names = ("127.0.0.1", "localhost")
        hosts = {f"{name}:{port}" for name in names}
        if port == DEFAULT_HTTP_PORT:
            # A browser leaves http's own port out of Host and Origin.
            hosts.update(names)
        self._hosts = frozenset(hosts)
        self._origins = frozenset(f"http://{host}" for host in self._hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 403 with the reason, or pass the request on with the headers added."""
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            if scope["type"] != "http":  # a websocket: nothing here speaks one
                await send({"type": "websocket.close", "code": 1008})
                return
            response = PlainTextResponse(refusal, status_code=403, headers=SECURITY_HEADERS)
            await response(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.decode("latin-1").lower() not in SECURITY_HEADERS
                ]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused, or ``None`` when it may go on."""
        if scope["type"] != "http":
            return "the viewer serves web pages only"
        client = scope.get("client")
        if client is None or not _loopback(client[0]):
            return "the viewer answers this machine only"
        headers = Headers(scope=scope)
        if headers.get("host", "") not in self._hosts:
            return (
                "refused: the Host header is not the viewer's address (127.0.0.1 or localhost "
                "with its port); a page served under another name may not reach it"
            )
        origin = headers.get("origin")
        if origin is not None and origin not in self._origins:
            return f"refused: a request from another site ({origin}) may not use the viewer"
        unsafe = scope["method"] not in _SAFE_METHODS
        if unsafe and headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "refused: a change sent from another site"
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = headers.get(TOKEN_HEADER) or next(iter(query.get(TOKEN_PARAMETER, [])), None)
        if not tokens_match(given, self._token):
            return (
                "refused: open the viewer with the URL `core-agent ui` printed (its token "
                "is missing or wrong)"
            )
        return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
