"""The client-facing side of the config: connection limits of the listener, and the admin surface.

`listen` bounds what one client connection may cost before the gateway has a request from it:
- `header_timeout`: a request line and headers must arrive within this many seconds of their first
  byte (of the connection, for a new one), or the connection is closed with 408. Without it a client
  that sends nothing, or half a request line, holds a descriptor for ever. 30 s, not less: a client
  opening thousands of connections at once writes its last heads seconds after the first were
  accepted, and a 408 there costs it a retry of work that was on its way.
- `body_timeout`, `body_min_rate`: once its head is in, a request's body must arrive within
  `body_timeout` seconds plus one second per `body_min_rate` bytes received (so a large upload at a
  reasonable pace is never cut), or the request is answered 408 (or cut, if its answer has begun)
  and the connection closed. Without it a client that sends a head and then stalls or trickles its
  body holds a connection, and the application waiting on that body, for ever.
- `max_header_bytes`, `max_headers`: a larger request head is refused with 431 before the parser
  accumulates it (httptools keeps every header in memory and has no bound of its own).
- `max_connections`: beyond it, the connection idle the longest (no request in progress) is closed
  to make room; if none is idle, the newcomer gets 503 (gateway.server.connection_cap). Also capped by the
  descriptors the process may open (see gateway.server.serve). A client holds a connection for each
  request waiting in the queue, and keeps it open afterwards for the next: a burst of 5,000 SDK
  requests holds 5,000. Past the cap every place is taken from someone (a kept-alive connection
  whose client may be about to reuse it, or a newcomer refused), so the default leaves room for
  such a burst and the other clients beside it; an idle connection costs the gateway about 7 KiB.
- `write_timeout`: a write to a client that does not read for this long ends the exchange, closes the
  upstream request (the backend aborts it) and releases its concurrency slot.
- `send_buffer`: the kernel's send buffer of each client connection, in bytes (Linux reserves twice
  this). Left to itself Linux grows it to 4 MiB, so a client that stops reading a stream made the
  gateway relay megabytes of it at full speed, on its event loop, before the write timeout could
  start counting; token streams and answers need far less to keep a connection busy.
- `keep_alive_timeout`: an idle keep-alive connection is closed after this many seconds.

`admin` protects `/admin/*` with a key (`api_key`, or `api_key_env` naming an environment variable),
and with `port` moves `/metrics` and `/admin/*` to a listener of their own (`host`, default loopback),
so the public port serves only the OpenAI API and `/health`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.reader import ConfigReader, default


@dataclass(frozen=True, slots=True)
class ListenLimits:
    header_timeout: float = 30.0
    body_timeout: float = 30.0
    body_min_rate: int = 64 * 1024
    """Bytes per second: each this many bytes of a body received extends its deadline by a second."""
    write_timeout: float = 30.0
    keep_alive_timeout: float = 75.0
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    max_connections: int = 16384
    send_buffer: int = 256 * 1024


@dataclass(frozen=True, slots=True)
class AdminConfig:
    api_key: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    """Set: /metrics and /admin/* are served on this port only, not on the public one."""
    probe_port: int | None = None
    """Set: /health and /live are answered on this port from a thread (gateway.server.probes)."""


LISTEN_KEYS = {
    "host",
    "port",
    "header_timeout",
    "body_timeout",
    "body_min_rate",
    "write_timeout",
    "keep_alive_timeout",
    "max_header_bytes",
    "max_headers",
    "max_connections",
    "send_buffer",
}


def parse_listen_limits(r: ConfigReader, listen: Mapping[str, Any]) -> ListenLimits:
    d = ListenLimits()
    seconds = {
        key: r.seconds(listen, key, getattr(d, key), "listen.")
        for key in ("header_timeout", "body_timeout", "write_timeout", "keep_alive_timeout")
    }
    return ListenLimits(
        **seconds,
        body_min_rate=r.number(listen, "body_min_rate", d.body_min_rate, "listen.", minimum=1, integer=True),
        max_header_bytes=r.number(
            listen, "max_header_bytes", d.max_header_bytes, "listen.", minimum=1024, integer=True
        ),
        max_headers=r.number(listen, "max_headers", d.max_headers, "listen.", minimum=8, integer=True),
        max_connections=r.number(
            listen, "max_connections", d.max_connections, "listen.", minimum=1, integer=True
        ),
        send_buffer=r.number(
            listen, "send_buffer", d.send_buffer, "listen.", minimum=4096, maximum=64 << 20, integer=True
        ),
    )


def parse_admin(r: ConfigReader, data: Mapping[str, Any], public_port: int) -> AdminConfig:
    admin = r.section(data, "admin", "")
    r.unknown(admin, {"api_key", "api_key_env", "host", "port", "probe_port"}, "admin.")
    host = admin.get("host", default(AdminConfig, "host"))
    if not isinstance(host, str) or not host:
        r.problems.append("admin.host: must be a host name or address")
        host = default(AdminConfig, "host")
    taken = {public_port: "listen.port"}
    port = _port(r, admin, "port", taken)
    probe_port = _port(r, admin, "probe_port", taken)
    return AdminConfig(
        api_key=r.secret(admin, "api_key", "admin."), host=host, port=port, probe_port=probe_port
    )


def _port(r: ConfigReader, admin: Mapping[str, Any], key: str, taken: dict[int, str]) -> int | None:
    """`admin.<key>`, a port no other listener in `taken` has (it is added there)."""
    if admin.get(key) is None:
        return None
    port = r.number(admin, key, 0, "admin.", minimum=1, integer=True)
    if port is None:
        return None
    if port > 65535:
        r.problems.append(f"admin.{key}: must be <= 65535, got {port}")
    elif port in taken:
        r.problems.append(f"admin.{key}: must differ from {taken[port]} ({port})")
    else:
        taken[int(port)] = f"admin.{key}"
    return int(port)
