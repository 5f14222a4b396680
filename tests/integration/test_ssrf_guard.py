"""No request ever reaches a blocked address, directly or through a redirect."""

import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core_agent.contracts.errors import SandboxRefusedError
from providers.sandbox.network import NetworkGuard, blocked_reason

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "public"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("::ffff:127.0.0.1", "IPv4-mapped"),
        ("::ffff:169.254.169.254", "IPv4-mapped"),
        ("64:ff9b::7f00:1", "NAT64"),
        ("64:ff9b::a9fe:a9fe", "NAT64"),
        ("2002:7f00:1::", "6to4"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ],
)
def test_non_public_addresses_are_classified(address: str, fragment: str) -> None:
    reason = blocked_reason(ipaddress.ip_address(address))
    assert reason is not None and fragment in reason


@pytest.mark.parametrize(
    "address",
    [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
        "::ffff:93.184.215.14",
        "64:ff9b::5db8:d70e",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None


class Listener:
    """A socket that only counts connections: nothing should ever connect to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def victim():
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def redirector(victim):
    targets = {
        "/loopback": f"http://127.0.0.1:{victim.port}/",
        "/metadata": "http://169.254.169.254/latest/meta-data/",
        "/mapped": f"http://[::ffff:127.0.0.1]:{victim.port}/",
        "/decimal": f"http://2130706433:{victim.port}/",
        "/hex": f"http://0x7f.1:{victim.port}/",
        "/localhost": f"http://localhost:{victim.port}/",
        "/file": "file:///etc/passwd",
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/hop/"):
                remaining = int(self.path.rsplit("/", 1)[1])
                location = f"/hop/{remaining - 1}" if remaining > 0 else "/final"
                self.send_response(302)
                self.send_header("Location", location)
                self.end_headers()
                return
            if self.path == "/final":
                body = f"reached, Host={self.headers['Host']}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(302)
            self.send_header("Location", targets[self.path])
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def guard_for(port: int) -> NetworkGuard:
    # The test server itself lives on loopback: that one address:port is explicitly allowed.
    return NetworkGuard(allowed_private=[f"127.0.0.1:{port}"], max_redirects=3, timeout_s=5)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/loopback", "loopback"),
        ("/metadata", "link-local"),
        ("/mapped", "IPv4-mapped"),
        ("/decimal", "loopback"),
        ("/hex", "loopback"),
        ("/localhost", "loopback"),
        ("/file", "only http and https"),
    ],
)
async def test_redirects_to_blocked_addresses_are_refused_before_connecting(
    redirector, victim, path, fragment
) -> None:
    with pytest.raises(SandboxRefusedError) as caught:
        await guard_for(redirector).fetch(f"http://127.0.0.1:{redirector}{path}")
    assert fragment in caught.value.reason
    assert victim.connections == 0


async def test_direct_requests_to_blocked_addresses_are_refused(victim) -> None:
    guard = NetworkGuard()
    for url in (
        f"http://127.0.0.1:{victim.port}/",
        f"http://2130706433:{victim.port}/",
        f"http://0x7f.1:{victim.port}/",
        f"http://[::1]:{victim.port}/",
        "http://169.254.169.254/",
        "gopher://example.org/",
    ):
        with pytest.raises(SandboxRefusedError):
            await guard.fetch(url)
    assert victim.connections == 0


async def test_allowed_redirects_are_followed_up_to_the_cap(redirector) -> None:
    guard = guard_for(redirector)
    result = await guard.fetch(f"http://127.0.0.1:{redirector}/hop/2")
    assert result.status == 200 and result.text.startswith("reached")
    assert f"Host=127.0.0.1:{redirector}" in result.text
    assert len(result.redirects) == 3
    with pytest.raises(SandboxRefusedError, match="more than 3 redirects"):
        await guard.fetch(f"http://127.0.0.1:{redirector}/hop/5")


async def test_the_domain_allowlist_applies_first() -> None:
    guard = NetworkGuard(allowed_domains=["*.example.org", "example.org"])
    with pytest.raises(SandboxRefusedError, match="not in the allowed domains"):
        await guard.check("https://evil.test/x")
