"""The HTTP face of the simulated vLLM server: a raw ASGI app (routing is a dict lookup).

Routes: vLLM's `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/v1/models`,
`/health`, `/version`, `/metrics`, and the sim's own `GET/POST /sim/faults`.
A client that goes away aborts its sequence at once (a task watches `receive` for the disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway.sim import tokens
from gateway.sim.driver import EngineDriver, TokenStream
from gateway.sim.faults import Faults
from gateway.sim.openai_format import (
    ENGINE_BUSY,
    ApiError,
    ChunkWriter,
    Generate,
    check_model,
    full_response,
    parse_chat,
    parse_completion,
    parse_json,
)
from gateway.sim.profiles import Profile

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

VLLM_VERSION = "0.11.0"
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
FAULTS_PATH = "/sim/faults"


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    length = (b"content-length", str(len(body)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [*headers, length]})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("client went away")
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def drop_connection(send: Send, receive: Receive) -> None:
    """Close the TCP connection without an HTTP answer (uvicorn: the cycle owns the transport)."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("cannot reach the connection to drop it")
    transport.abort()
    while (await receive())["type"] != "http.disconnect":
        pass


class SimApp:
    def __init__(self, profile: Profile, model: str, driver: EngineDriver, seed: int) -> None:
        self.profile = profile
        self.model = model
        self.driver = driver
        self.created = int(time.time())
        self._fault_rng = random.Random(seed ^ 0x5EED)
        self._hang_released = asyncio.Event()
        self._front_busy = asyncio.Lock()
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completion,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/metrics"): self._metrics,
        }
        self._paths = {path for _, path in self._routes}

    @property
    def faults(self) -> Faults:
        return self.driver.faults

    def set_faults(self, faults: Faults) -> None:
        was_hung = self.driver.faults.hang
        self.driver.set_faults(faults)
        if was_hung and not faults.hang:
            self._hang_released.set()
            self._hang_released = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets: nothing to do
        path: str = scope["path"]
        method: str = scope["method"]
        if path == FAULTS_PATH:
            await self._faults(method, receive, send)
            return
        faults = self.driver.faults
        if faults.die:
            await drop_connection(send, receive)
            return
        if faults.hang:
            await self._hang_released.wait()
            await drop_connection(send, receive)
            return
        handler = self._routes.get((method, path))
        if handler is None:
            status = 405 if path in self._paths else 404
            detail = b"Method Not Allowed" if status == 405 else b"Not Found"
            await _respond(send, status, b'{"detail":"' + detail + b'"}', JSON)
            return
        try:
            await handler(scope, receive, send)
        except ApiError as exc:
            await _respond(send, exc.status, exc.body(), JSON)
        except ConnectionResetError:
            return

    # --- admin -----------------------------------------------------------------------------

    async def _faults(self, method: str, receive: Receive, send: Send) -> None:
        if method == "POST":
            try:
                body = parse_json(await _read_body(receive))
                self.set_faults(self.driver.faults.updated(body))
            except ApiError as exc:
                await _respond(send, exc.status, exc.body(), JSON)
                return
            except ValueError as exc:
                await _respond(send, 400, ApiError(400, str(exc)).body(), JSON)
                return
        elif method != "GET":
            await _respond(send, 405, b'{"detail":"Method Not Allowed"}', JSON)
            return
        await _respond(send, 200, orjson.dumps(self.driver.faults.as_dict()), JSON)

    # --- simple routes ---------------------------------------------------------------------

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, b"", [])

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _respond(send, 200, orjson.dumps({"version": VLLM_VERSION}), JSON)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.driver.metrics.render()
        await _respond(send, 200, body, [(b"content-type", b"text/plain; version=0.0.4")])

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        card = {
            "id": self.model,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.profile.max_model_len,
        }
        await _respond(send, 200, orjson.dumps({"object": "list", "data": [card]}), JSON)

    async def _embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await _read_body(receive))
        model = check_model(body, self.model)
        self._maybe_fail()
        raw = body.get("input")
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
            raise ApiError(400, "input must be a string or a list of strings", "input")
        data = []
        used = 0
        for i, text in enumerate(inputs):
            n, _ = tokens.text_prompt(text, self.profile)
            if n > self.profile.max_model_len:
                raise ApiError(400, f"input {i} has {n} tokens, over max_model_len")
            used += n
            vector = tokens.embedding(text, self.profile.embedding_dim, self.profile.seed)
            data.append({"index": i, "object": "embedding", "embedding": vector})
        reply = {
            "id": f"embd-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": used, "total_tokens": used, "completion_tokens": 0},
        }
        await _respond(send, 200, orjson.dumps(reply), JSON)

    def _maybe_fail(self) -> None:
        faults = self.driver.faults
        if faults.error_rate > 0 and self._fault_rng.random() < faults.error_rate:
            raise ApiError(faults.error_status, "injected fault: the server failed this request")

    # --- generation ------------------------------------------------------------------------

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await _read_body(receive))
        await self._generate(parse_chat(body, self.profile, self.model), "chatcmpl", receive, send)

    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = parse_json(await _read_body(receive))
        req = parse_completion(body, self.profile, self.model)
        await self._generate(req, "cmpl", receive, send)

    async def _generate(self, req: Generate, prefix: str, receive: Receive, send: Send) -> None:
        self._maybe_fail()
        await self._front_end()
        self._admit()
        stream = self.driver.submit(
            req.prompt_len, req.hashes, max_tokens=req.max_tokens, ignore_eos=req.ignore_eos
        )
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, stream))
        rid = f"{prefix}-{uuid.uuid4().hex}"
        try:
            if req.stream:
                await self._stream(req, rid, stream, send)
            else:
                await self._whole(req, rid, stream, send)
        finally:
            watcher.cancel()
            self.driver.abort(stream)
        if stream.aborted and self.driver.faults.die:
            with contextlib.suppress(RuntimeError):
                await drop_connection(send, receive)

    def _admit(self) -> None:
        """Refuse as vLLM 0.32's engine client does past `--max-num-queued-reqs`: 503, its words."""
        cap = self.driver.faults.max_num_queued_reqs
        engine = self.driver.engine
        if cap and engine.num_running + engine.num_waiting + 1 > cap:
            raise ApiError(503, ENGINE_BUSY)

    async def _front_end(self) -> None:
        """Hold the request as the API server would before the engine sees it (gateway.sim.frontend):
        a parallel delay (the profile's overhead plus the `frontend_delay` fault), then the host's
        per-request busy time, one request at a time."""
        hold = self.profile.frontend_overhead + self.driver.faults.frontend_delay
        if hold > 0:
            await asyncio.sleep(hold)
        if self.profile.frontend_busy > 0:
            async with self._front_busy:
                await asyncio.sleep(self.profile.frontend_busy)

    async def _watch(self, receive: Receive, stream: TokenStream) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.driver.abort(stream)

    async def _stream(self, req: Generate, rid: str, stream: TokenStream, send: Send) -> None:
        headers = [*SSE, (b"x-request-id", rid.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        writer = ChunkWriter(req, rid, self.created)
        uid = stream.seq.uid
        if req.kind == "chat":
            await send({"type": "http.response.body", "body": writer.role(), "more_body": True})
        while True:
            start = stream.taken
            count = await stream.next(self.profile.stream_burst)
            if count == 0:
                if stream.aborted:
                    return  # client gone or server dying: no [DONE]
                break
            text = tokens.output_text(uid, start, count)
            last = stream.ended and stream.seq.num_output == stream.taken
            chunk = writer.token(text, stream.seq.finish_reason if last else None)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        tail = writer.usage(stream.taken) if req.include_usage else b""
        await send({"type": "http.response.body", "body": tail + writer.DONE, "more_body": False})

    async def _whole(self, req: Generate, rid: str, stream: TokenStream, send: Send) -> None:
        while await stream.next():
            pass
        if stream.aborted:
            return
        seq = stream.seq
        text = tokens.output_text(seq.uid, 0, seq.num_output)
        body = full_response(req, rid, self.created, text, seq.finish_reason, seq.num_output)
        await _respond(send, 200, body, [*JSON, (b"x-request-id", rid.encode())])
