"""Attacks through what one request can cost the gateway, each an asyncio task kept up until told to
stop (the counterpart of loadtests/abuse/attacks.py, which holds connections):

- protocol upgrades: WebSocket upgrade requests on new connections, each closed by the client after
  the answer (each used to keep its place under the connection cap for good);
- long session ids: chat requests whose `user` is a new 1 MB string every time (the session map
  behind prefix routing held each one);
- many JSON values: 16 MB bodies of small values (8M token ids): the parse held the event loop for
  seconds before the model was even checked;
- longest token-id prompt: prompts of just under the 131,072 values a body may hold, the largest
  parse the gateway still does, sent on (the simulated engine's 32K context then refuses them);
- echoing batch lines: batches whose 20 lines carry a 300 KB url, created and listed again and
  again (each error used to store the whole url);
- huge batch line: a batch whose one line holds 8M values, to be validated.
"""

from __future__ import annotations

import asyncio
import itertools

import httpx
import orjson

from loadtests.abuse.attacks import Target, open_socket

UPGRADE = (
    b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
CHAT = "/v1/chat/completions"


def _base(t: Target) -> str:
    return f"http://127.0.0.1:{t.port}"


async def protocol_upgrades(t: Target, stop: asyncio.Event, concurrency: int = 4) -> None:
    loop = asyncio.get_running_loop()

    async def one() -> None:
        while not stop.is_set():
            try:
                sock = await open_socket(t.port)
            except (OSError, TimeoutError):
                t.count("failed to open")
                await asyncio.sleep(0.1)
                continue
            try:
                await loop.sock_sendall(sock, UPGRADE)
                async with asyncio.timeout(5):
                    answer = await loop.sock_recv(sock, 64)
                t.count(f"upgrade: {answer[9:12].decode(errors='replace') or 'closed'}")
            except (OSError, TimeoutError):
                t.count("upgrade: no answer")
            finally:
                sock.close()

    await asyncio.gather(*(one() for _ in range(concurrency)))


async def _post_loop(
    t: Target, stop: asyncio.Event, what: str, path: str, body: bytes | None, concurrency: int, **kw: object
) -> None:
    """POST `body` (or what `kw["bodies"]` yields) to `path` until `stop`, counting the statuses."""
    bodies = kw.get("bodies")

    async def one(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            content = next(bodies) if bodies is not None else body  # type: ignore[call-overload]
            try:
                resp = await client.post(path, content=content, headers={"content-type": "application/json"})
                t.count(f"{what}: {resp.status_code}")
            except httpx.HTTPError as exc:
                t.count(f"{what}: {type(exc).__name__}")

    async with httpx.AsyncClient(base_url=_base(t), timeout=60) as client:
        await asyncio.gather(*(one(client) for _ in range(concurrency)))


async def long_session_ids(t: Target, stop: asyncio.Event) -> None:
    filler = "u" * (1 << 20)
    bodies = (
        orjson.dumps(
            {
                "model": t.model,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1,
                "user": f"{i}{filler}",
            }
        )
        for i in itertools.count()
    )
    await _post_loop(t, stop, "1 MB user", CHAT, None, 4, bodies=bodies)


async def many_json_values(t: Target, stop: asyncio.Event) -> None:
    body = b'{"model": "%s", "prompt": [' % t.model.encode() + b"1," * 8_000_000 + b'1], "max_tokens": 1}'
    await _post_loop(t, stop, "16 MB of values", "/v1/completions", body, 2)


async def longest_token_prompt(t: Target, stop: asyncio.Event) -> None:
    ids = ",".join(str(1000 + i % 30_000) for i in range(131_000)).encode()
    body = b'{"model": "%s", "prompt": [%s], "max_tokens": 1}' % (t.model.encode(), ids)
    await _post_loop(t, stop, "131K token ids", "/v1/completions", body, 2)


async def _batches(t: Target, stop: asyncio.Event, what: str, data: bytes, list_too: bool) -> None:
    async with httpx.AsyncClient(base_url=_base(t), timeout=120) as client:
        up = await client.post("/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"})
        t.count(f"upload: {up.status_code}")
        if up.status_code != 200:
            return
        create = {"input_file_id": up.json()["id"], "endpoint": CHAT, "completion_window": "24h"}
        while not stop.is_set():
            resp = await client.post("/v1/batches", json=create)
            t.count(f"{what}: {resp.status_code}")
            if list_too:
                listed = await client.get("/v1/batches?limit=100")
                t.count(f"listed MB: {len(listed.content) >> 20}")
            await asyncio.sleep(0.2)


def _line(custom_id: str, model: str, url: str = CHAT, content: object = "hi") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 1}
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}) + b"\n"


async def echoing_batch_lines(t: Target, stop: asyncio.Event) -> None:
    url = "/v1/" + "u" * 300_000
    data = b"".join(_line(f"r{i}", t.model, url) for i in range(20))
    await _batches(t, stop, "batch of 300 KB urls", data, list_too=True)


async def huge_batch_line(t: Target, stop: asyncio.Event) -> None:
    line = b'{"custom_id": "a", "method": "POST", "url": "%s", "body": {"model": "%s", "prompt": [' % (
        CHAT.encode(),
        t.model.encode(),
    )
    data = line + b"1," * 8_000_000 + b"1]}}\n"
    await _batches(t, stop, "batch of one 8M-value line", data, list_too=False)


INPUT_ATTACKS = {
    "protocol upgrades": protocol_upgrades,
    "long session ids": long_session_ids,
    "many JSON values": many_json_values,
    "longest token-id prompt": longest_token_prompt,
    "echoing batch lines": echoing_batch_lines,
    "huge batch line": huge_batch_line,
}
