"""Who gets through the viewer's door (``LocalAccess``), request by request."""

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from core_agent.trace_viewer.access import SECURITY_HEADERS, LocalAccess

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-of-this-viewer"
PORT = 8123
HOME = f"http://127.0.0.1:{PORT}"


async def _page(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the page")


APP = Starlette(routes=[Route("/", _page, methods=["GET", "POST"])])


def _client(address: str = "127.0.0.1", port: int = PORT) -> httpx.AsyncClient:
    guarded = LocalAccess(APP, token=TOKEN, port=port)
    transport = httpx.ASGITransport(app=guarded, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url=HOME)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with _client() as client:
        yield client


async def test_the_token_in_the_url_or_a_header_lets_in(client) -> None:
    assert (await client.get("/", params={"token": TOKEN})).text == "the page"
    assert (await client.get("/", headers={"x-core-agent-token": TOKEN})).text == "the page"
    local = await client.get("/", params={"token": TOKEN}, headers={"host": f"localhost:{PORT}"})
    assert local.status_code == 200


async def test_without_the_token_every_request_is_refused(client) -> None:
    for params in ({}, {"token": ""}, {"token": TOKEN[:-1]}, {"token": TOKEN + "x"}):
        refused = await client.get("/", params=params)
        assert refused.status_code == 403
        assert "core-agent ui" in refused.text and TOKEN not in refused.text


async def test_a_page_under_another_name_is_refused(client) -> None:
    # DNS rebinding: evil.example resolves to 127.0.0.1, but the browser sends its name.
    for host in ("evil.example", f"evil.example:{PORT}", "127.0.0.1:9999", "127.0.0.1"):
        refused = await client.get("/", params={"token": TOKEN}, headers={"host": host})
        assert refused.status_code == 403, host
        assert "Host" in refused.text


async def test_on_port_80_the_address_a_browser_sends_has_no_port() -> None:
    # Reviewer: `core-agent ui --port 80` refused its own printed URL (Host: 127.0.0.1).
    async with _client(port=80) as client:
        for host in ("127.0.0.1", "localhost", "127.0.0.1:80"):
            own = {"host": host, "origin": f"http://{host}", "sec-fetch-site": "same-origin"}
            let_in = await client.post("/", params={"token": TOKEN}, headers=own)
            assert let_in.status_code == 200, host
        for host in ("evil.example", "127.0.0.1:8123"):
            refused = await client.get("/", params={"token": TOKEN}, headers={"host": host})
            assert refused.status_code == 403, host


async def test_requests_from_another_site_are_refused(client) -> None:
    cross = {"origin": "http://evil.example"}
    assert (await client.get("/", params={"token": TOKEN}, headers=cross)).status_code == 403
    assert (await client.post("/", params={"token": TOKEN}, headers=cross)).status_code == 403
    fetched = {"sec-fetch-site": "cross-site"}
    assert (await client.post("/", params={"token": TOKEN}, headers=fetched)).status_code == 403
    own = {"origin": HOME, "sec-fetch-site": "same-origin"}
    assert (await client.post("/", params={"token": TOKEN}, headers=own)).status_code == 200


async def test_only_loopback_clients_are_answered() -> None:
    async with _client("192.168.1.20") as client:
        refused = await client.get("/", params={"token": TOKEN})
    assert refused.status_code == 403 and "this machine only" in refused.text


async def test_every_answer_forbids_framing_and_foreign_assets(client) -> None:
    for response in (await client.get("/", params={"token": TOKEN}), await client.get("/")):
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value
    policy = SECURITY_HEADERS["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert "script-src" not in policy  # no script may run at all
