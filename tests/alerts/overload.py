"""A bounded overload for a gateway: closed-loop streaming clients (the OpenAI SDK) in a thread.

Each of `workers` clients sends a streaming chat request with `ignore_eos` (so every answer is
`max_tokens` long), reads it to the end and sends the next, until `stop()` or until `max_seconds`
or `max_requests` is reached. The event loop runs in a thread of its own so the test can block on
Prometheus meanwhile. On stop the open streams are cancelled: the clients go away, as a real load
that stops does, and the gateway drops their queued requests.

    with Overload(gateway_url, model, workers=20) as load:
        ...  # the gateway is overloaded here
    assert not load.errors
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

import openai


class Overload:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        workers: int = 20,
        max_tokens: int = 200,
        max_requests: int = 2000,
        max_seconds: float = 60.0,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.workers = workers
        self.max_tokens = max_tokens
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.started = 0
        self.completed = 0
        self.errors: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="overload", daemon=True)

    def __enter__(self) -> Overload:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the load's event loop did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self, timeout: float = 15.0) -> None:
        """Cancel every client and wait for the thread; idempotent."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the load did not stop within {timeout}s")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # reported through `errors`, which the test asserts on
            self.errors.append(f"the load failed: {type(exc).__name__}: {exc}")
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        # Clients that would rather wait than be refused (x-queue-timeout): the load stands in the
        # queue, as capacity running out looks when the excess is patient.
        client = openai.AsyncOpenAI(
            base_url=f"{self.base_url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=120.0,
            default_headers={"x-queue-timeout": "60"},
        )
        tasks = [asyncio.create_task(self._client(client)) for _ in range(self.workers)]
        try:
            await asyncio.wait_for(self._stop.wait(), self.max_seconds)
        except TimeoutError:
            self.errors.append(f"the load ran into its {self.max_seconds}s bound before stop()")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()

    async def _client(self, client: openai.AsyncOpenAI) -> None:
        assert self._stop is not None
        while not self._stop.is_set() and self.started < self.max_requests:
            self.started += 1
            try:
                stream = await client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": "Tell me about the sea."}],
                    max_tokens=self.max_tokens,
                    stream=True,
                    extra_body={"ignore_eos": True},
                )
                async for _chunk in stream:
                    pass
                self.completed += 1
            except openai.APIError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                # Back off until stop rather than hammer a gateway that rejects.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 0.5)
