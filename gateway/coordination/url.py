"""Where the shared state lives: the forms of `state.redis_url`, parsed and checked without I/O.

Accepted forms (one URL names one Redis deployment):
- `redis://[[user]:password@]host[:port][/db]`: one server (a managed Redis's endpoint, a
  Kubernetes Service in front of one Redis).
- `rediss://...`: the same over TLS; query options (`ssl_cert_reqs`, `ssl_ca_certs`, ...) are
  handed to the client unchanged.
- `unix:///path/to/redis.sock[?db=N]`: a local socket.
- `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]` and
  `rediss+sentinel://...`: Redis Sentinel. The hosts are sentinels (port 26379 by default); the
  client asks them for the current master of `service` and asks again after a failover, so a
  promoted replica is found without a restart. Credentials are the master's; sentinels are asked
  without them (the common setup), and with TLS when the scheme says so.

This module is a leaf: config validation uses it, and so does the connection factory.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

DIRECT_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """A Redis found through Sentinel."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False


@dataclass(frozen=True, slots=True)
class DirectTarget:
    """A Redis reached at one address; `url` is handed to the client as it is."""

    url: str


RedisTarget = DirectTarget | SentinelTarget


def parse_redis_url(url: str) -> RedisTarget:
    """The target a URL names, or ValueError saying what is wrong with it."""
    if not isinstance(url, str) or not url:
        raise ValueError("must be a URL like redis://host:6379/0")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in DIRECT_SCHEMES:
        if scheme == "unix":
            if not parts.path:
                raise ValueError(f"a unix:// URL needs a socket path, got {url!r}")
        elif not parts.hostname:
            raise ValueError(f"needs a host, got {url!r}")
        else:
            try:
                _port(parts.port, url)
            except ValueError as exc:  # urlsplit's own complaint about the port
                raise ValueError(f"port must be 1-65535 in {url!r}") from exc
            _db(parts.path.strip("/"), url)
        return DirectTarget(url)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel(url)
    allowed = ", ".join(f"{s}://" for s in DIRECT_SCHEMES + SENTINEL_SCHEMES)
    raise ValueError(f"unknown scheme {parts.scheme!r} in {url!r} (use one of {allowed})")


def _sentinel(url: str) -> SentinelTarget:
    parts = urlsplit(url)
    netloc = parts.netloc
    username = password = None
    if "@" in netloc:
        creds, netloc = netloc.rsplit("@", 1)
        user, _, secret = creds.partition(":")
        username = unquote(user) or None
        password = unquote(secret) or None
    sentinels: list[tuple[str, int]] = []
    for item in netloc.split(","):
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise ValueError(f"every sentinel needs a host, got {url!r}")
        if port_text and not port_text.isdigit():
            raise ValueError(f"sentinel port must be a number, got {port_text!r} in {url!r}")
        sentinels.append((host, _port(int(port_text) if port_text else SENTINEL_PORT, url)))
    segments = [s for s in parts.path.split("/") if s]
    if not segments:
        raise ValueError(f"a Sentinel URL needs the service name as its path, got {url!r}")
    if len(segments) > 2:
        raise ValueError(f"a Sentinel URL's path is /service[/db], got {parts.path!r}")
    db = _db(segments[1] if len(segments) == 2 else "", url)
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=unquote(segments[0]),
        db=db,
        username=username,
        password=password,
        tls=parts.scheme.lower().startswith("rediss"),
    )


def _port(port: int | None, url: str) -> int:
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"port must be 1-65535 in {url!r}")
    return port or 0


def _db(text: str, url: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"the database must be a number, got {text!r} in {url!r}")
    return int(text)


def redacted(url: str) -> str:
    """The URL with any password replaced, for logs and /admin/state."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    creds, hosts = parts.netloc.rsplit("@", 1)
    user = creds.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{hosts}" if ":" in creds else f"***@{hosts}").geturl()
