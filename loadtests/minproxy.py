"""bench_proxy's yardstick: the least a Python HTTP proxy does per request on the gateway's libraries.

uvicorn with httptools and uvloop, a raw ASGI callable, one aiohttp session with an unbounded
connection pool: the body is read whole, POSTed to the same path upstream, and the answer is relayed
chunk by chunk as it arrives with a JSON content type. No admission, no metrics, no header handling,
no timeouts: what the gateway costs beyond this is the price of its features.

    python -m loadtests.minproxy PORT UPSTREAM_BASE_URL
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import uvicorn

_JSON = [(b"content-type", b"application/json")]


class MinimalProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        assert self.session is not None
        url = self.upstream + scope["path"]
        async with self.session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
            await send({"type": "http.response.start", "status": resp.status, "headers": _JSON})
            async for chunk in resp.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(
        MinimalProxy(upstream),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
