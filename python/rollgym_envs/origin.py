"""Which browsers may use the provider, checked at every HTTP request and WebSocket upgrade.

The same rules as `rollgym serve` without a token (src/server/origin.ts, docs/server.md
"Browsers"): a page the researcher merely visits must not open sessions (they cost env
instances and worker time), and a page that rebinds its own DNS name to the provider's address
must not either: its requests look same-origin to the browser but carry its name in Host.
Browsers put an Origin on every WebSocket handshake, so an upgrade without one (a trainer, an
OpenEnv client) may reach the provider by any name; so may a /health probe.
"""

import ipaddress
import re
import socket
from typing import Any, Iterable, Optional, Tuple
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$")


def normal_origin(value: str) -> str:
    """An origin as browsers send it (scheme://host[:port], lower case, no default port)."""
    parts = _origin_parts(value)
    if parts is None:
        raise ValueError(f"allow_origins: {value!r} is not an origin: expected http(s)://host[:port] and nothing after it (like https://lab.example:8443)")
    scheme, name, port = parts
    return _origin_text(scheme, name, port)


def _origin_parts(value: str) -> Optional[Tuple[str, str, int]]:
    try:
        url = urlsplit(value.strip())
        port = url.port
    except ValueError:
        return None
    scheme = url.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not url.hostname or url.path not in ("", "/") or url.query or url.fragment or "@" in url.netloc:
        return None
    return scheme, url.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def _origin_text(scheme: str, name: str, port: int) -> str:
    host = f"[{name}]" if ":" in name else name
    return f"{scheme}://{host}" + ("" if port == _DEFAULT_PORTS[scheme] else f":{port}")


def _host_parts(host: str) -> Optional[Tuple[str, Optional[int]]]:
    """(name without brackets, lower case; port or None) of a Host header; None if malformed."""
    match = _HOST.match(host)
    if match is None:
        return None
    port = int(match.group(2)) if match.group(2) else None
    if port is not None and port > 65535:
        return None
    return match.group(1).strip("[]").lower(), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class OriginPolicy:
    def __init__(self, allow_origins: Iterable[str] = (), allow_hosts: Iterable[str] = ()):
        self.origins = {normal_origin(o) for o in allow_origins}
        hosts = ["localhost", socket.gethostname(), *allow_hosts]
        hosts += [_origin_parts(o)[1] for o in self.origins]  # type: ignore[index]
        self.hosts = {h.lower() for h in hosts}

    def add_host(self, name: str) -> None:
        """Also answer browsers by the name the provider listens on."""
        self.hosts.add(name.lower())

    def refusal(self, path: str, headers: Any) -> Optional[str]:
        """Why a request is refused (HTTP 403), or None when it may go on."""
        origin = headers.get("Origin")
        site = headers.get("Sec-Fetch-Site")
        if origin is None and site is None and (_is_upgrade(headers) or _is_health(path)):
            return None  # not a page: browsers always send an Origin on an upgrade
        host = headers.get("Host") or ""
        parts = _host_parts(host)
        if parts is None or not self._host_allowed(parts[0]):
            return (
                f"Host {host[:100]!r} is not a name this provider is known by (IP addresses, localhost, {socket.gethostname()}); "
                "reaching it by another name needs --allow-host NAME (or --allow-origin for a page's origin)"
            )
        if origin is not None:
            if self._origin_allowed(origin, parts):
                return None
            return f"Origin {origin[:100]!r} may not use this provider: only its own page ({host}) and --allow-origin origins may"
        # No Origin: a same-origin read, a navigation, or a no-cors request from another site.
        if site in (None, "same-origin", "none") or headers.get("Sec-Fetch-Mode") == "navigate":
            return None
        return f"a request from another site (Sec-Fetch-Site: {site[:40]}) may not use this provider"

    def _host_allowed(self, name: str) -> bool:
        return _is_ip(name) or name.endswith(".localhost") or name in self.hosts

    def _origin_allowed(self, origin: str, host: Tuple[str, Optional[int]]) -> bool:
        parts = _origin_parts(origin)  # None for "null" (sandboxed frames, files) and garbage
        if parts is None:
            return False
        scheme, name, port = parts
        if _origin_text(scheme, name, port) in self.origins:
            return True
        # The page's own origin: the host and port the request was sent to (http, or https
        # when a TLS proxy forwards to us).
        return (name, port) == (host[0], host[1] if host[1] is not None else _DEFAULT_PORTS[scheme])


def _is_upgrade(headers: Any) -> bool:
    return (headers.get("Upgrade") or "").lower() == "websocket"


def _is_health(path: str) -> bool:
    return path.split("?")[0].rstrip("/").rsplit("/", 1)[-1] == "health"
