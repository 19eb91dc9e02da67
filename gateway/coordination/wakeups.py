"""Hears the releases other processes announce, and wakes this process's pump for that backend.

RELEASE publishes on the backend's channel (scripts.py); one subscription per process listens to
every backend's channel and calls `wake(backend)`. Why pub/sub and not only a poll: a request
waiting here for a slot freed in another process is then woken within a round trip instead of
within a poll period (the poll stays, in pump.py, for messages lost while the subscription was
down). A broken subscription is opened again after `retry` seconds, for as long as it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from redis.asyncio import Redis

from gateway.coordination.coordinator import FAILURES
from gateway.coordination.scripts import Keys

log = logging.getLogger(__name__)


class ReleaseListener:
    def __init__(
        self,
        redis: Redis,
        backends: Iterable[str],
        wake: Callable[[str], None],
        *,
        keys: Keys | None = None,
        retry: float = 1.0,
    ) -> None:
        keys = keys or Keys()
        self._channels = {keys.released_channel(b): b for b in backends}
        self._redis = redis
        self._wake = wake
        self._retry = retry
        self.heard = 0

    async def run(self) -> None:
        """Listen until cancelled, subscribing again after a failure."""
        while True:
            try:
                await self._listen()
            except FAILURES as exc:
                log.debug("release announcements unavailable (%s); retrying", exc)
            await asyncio.sleep(self._retry)

    async def _listen(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*self._channels)
            while True:
                # A bounded wait: the client's socket timeout must not read as a broken link.
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
                if message is None:
                    continue
                backend = self._channels.get(str(message.get("channel")))
                if backend is not None:
                    self.heard += 1
                    self._wake(backend)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
