"""Outbound HTTP that cannot be turned against the machine or its network (SSRF).

A URL is allowed when its host matches the domain allowlist and *every* address the name
resolves to is public: loopback, private, link-local (cloud metadata), CGNAT, multicast,
reserved and unspecified addresses are refused, including when hidden in IPv4-mapped IPv6,
NAT64 (64:ff9b::/96), 6to4 or Teredo addresses, or written as decimal or hex (the resolver
turns ``2130706433`` and ``0x7f.1`` into 127.0.0.1, and the address is what is judged). The
request then connects to the address that was checked (not to a second lookup), and each
redirect is checked again before it is followed.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import anyio
import httpx

from core_agent.contracts.errors import SandboxRefusedError, ToolExecutionError
from core_agent.contracts.host_names import normalize_host
from core_agent.contracts.tool_sandbox import FetchResult, SandboxVerdict

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def blocked_reason(address: IPAddress) -> str | None:
    """Why connecting to ``address`` is refused, or ``None`` for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return _labelled(blocked_reason(address.ipv4_mapped), "IPv4-mapped")
        if address in _NAT64 or address in _NAT64_LOCAL:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            return _labelled(blocked_reason(embedded), "NAT64")
        if address.sixtofour is not None:
            return _labelled(blocked_reason(address.sixtofour), "6to4")
        if address.teredo is not None:
            return "a Teredo tunnel address"
    for test, label in (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_link_local, "a link-local address (cloud metadata lives there)"),
        (address.is_private, "a private-network address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    ):
        if test:
            return label
    return None


def _labelled(reason: str | None, wrapper: str) -> str | None:
    return None if reason is None else f"{reason} ({wrapper})"


@dataclass(frozen=True, slots=True)
class CheckedURL:
    """A URL that passed, with the address to connect to."""

    url: str
    host: str
    port: int
    address: IPAddress


class NetworkGuard:
    """Domain allowlist, address classification and redirect-checked fetching."""

    def __init__(
        self,
        *,
        allowed_domains: Sequence[str] = ("*",),
        allowed_private: Sequence[str] = (),
        max_redirects: int = 5,
        max_bytes: int = 1_048_576,
        timeout_s: float = 20.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._domains = [_domain_pattern(d) for d in allowed_domains]
        self._private = {entry.lower() for entry in allowed_private}
        self._max_redirects = max_redirects
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._transport = transport

    def _domain_allowed(self, host: str) -> bool:
        return any(
            pattern == "*" or host == pattern or fnmatch.fnmatchcase(host, pattern)
            for pattern in self._domains
        )

    async def check(self, url: str) -> CheckedURL:
        """The URL with its checked address, or ``SandboxRefusedError``."""
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise SandboxRefusedError(f"{url!r}: malformed URL ({exc})") from exc
        if parts.scheme not in ("http", "https"):
            raise SandboxRefusedError(f"{url!r}: only http and https URLs may be fetched")
        if not parts.hostname:
            raise SandboxRefusedError(f"{url!r}: no host")
        try:
            host = normalize_host(parts.hostname)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise SandboxRefusedError(f"{url!r}: malformed host or port ({exc})") from exc
        if not self._domain_allowed(host):
            raise SandboxRefusedError(f"{host} is not in the allowed domains")
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise SandboxRefusedError(f"{host} does not resolve ({exc})") from exc
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise SandboxRefusedError(f"{host} does not resolve")
        for address in addresses:
            reason = blocked_reason(address)
            key = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
            if reason and key not in self._private:
                raise SandboxRefusedError(f"{host} resolves to {address}, {reason}")
        return CheckedURL(url=url, host=host, port=port, address=addresses[0])

    async def verdict(self, url: str) -> SandboxVerdict:
        """``check`` as a verdict."""
        try:
            await self.check(url)
        except SandboxRefusedError as exc:
            return SandboxVerdict(False, exc.reason)
        return SandboxVerdict(True)

    async def fetch(self, url: str, max_bytes: int | None = None) -> FetchResult:
        """GET with every hop checked and pinned to its checked address."""
        limit = max_bytes or self._max_bytes
        hops: list[str] = []
        current = url
        async with httpx.AsyncClient(
            transport=self._transport,
            follow_redirects=False,
            trust_env=False,
            timeout=self._timeout_s,
        ) as client:
            for _ in range(self._max_redirects + 1):
                checked = await self.check(current)
                response_data = await self._request(client, checked, limit)
                status, headers, body, truncated = response_data
                location = headers.get("location")
                if status in _REDIRECTS and location:
                    hops.append(current)
                    current = urljoin(current, location)
                    continue
                charset = _charset(headers.get("content-type", ""))
                return FetchResult(
                    status=status,
                    url=current,
                    headers=headers,
                    text=body.decode(charset, "replace"),
                    truncated=truncated,
                    redirects=tuple(hops),
                )
        raise SandboxRefusedError(f"more than {self._max_redirects} redirects from {url}")

    async def _request(
        self, client: httpx.AsyncClient, checked: CheckedURL, limit: int
    ) -> tuple[int, dict[str, str], bytes, bool]:
        parts = urlsplit(checked.url)
        literal = f"[{checked.address}]" if checked.address.version == 6 else str(checked.address)
        pinned = urlunsplit(
            (parts.scheme, f"{literal}:{checked.port}", parts.path or "/", parts.query, "")
        )
        default_port = 443 if parts.scheme == "https" else 80
        host_header = (
            checked.host if checked.port == default_port else (f"{checked.host}:{checked.port}")
        )
        extensions = {"sni_hostname": checked.host} if parts.scheme == "https" else {}
        try:
            async with client.stream(
                "GET", pinned, headers={"Host": host_header}, extensions=extensions
            ) as response:
                chunks: list[bytes] = []
                size = 0
                truncated = False
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        truncated = True
                        break
                body = b"".join(chunks)[:limit]
                headers = {k.lower(): v for k, v in response.headers.items()}
                return response.status_code, headers, body, truncated
        except httpx.HTTPError as exc:
            raise ToolExecutionError(
                f"fetching {checked.url} failed: {type(exc).__name__}: {exc}", tool_name=""
            ) from exc


def _domain_pattern(pattern: str) -> str:
    """An allowed-domain glob in the form hosts are compared in (wildcards kept)."""
    if pattern == "*":
        return pattern
    try:
        return normalize_host(pattern.replace("*", "wildcard")).replace("wildcard", "*")
    except ValueError:
        return pattern.lower().rstrip(".")


def _charset(content_type: str) -> str:
    for part in content_type.split(";"):
        name, _, value = part.strip().partition("=")
        if name.lower() == "charset" and value:
            try:
                "".encode(value.strip('"'))
            except LookupError:
                break
            return value.strip('"')
    return "utf-8"
