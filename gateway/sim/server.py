"""`SimServer`: the simulated vLLM server in-process, on uvicorn (httptools), bound to a real port.

server = SimServer(SimConfig(profile=get_profile("tiny-cpu")), port=0)
url = await server.start()      # "http://127.0.0.1:PORT"
...
await server.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import Generator
from dataclasses import dataclass, field

import uvicorn

from gateway.sim.app import SimApp
from gateway.sim.driver import EngineDriver
from gateway.sim.engine import Engine
from gateway.sim.faults import Faults
from gateway.sim.metrics import SimMetrics
from gateway.sim.profiles import Profile, get_profile
from gateway.types import Clock


@dataclass(frozen=True, slots=True)
class SimConfig:
    profile: Profile = field(default_factory=lambda: get_profile("tiny-cpu"))
    model: str | None = None
    """Served model name; the profile's when None."""
    faults: Faults = field(default_factory=Faults)

    @property
    def served_model(self) -> str:
        return self.model or self.profile.model


class _Server(uvicorn.Server):
    """uvicorn's server with a startup event and without taking over the process's signals."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class SimServer:
    def __init__(
        self,
        config: SimConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.config = config or SimConfig()
        self.host = host
        self.port = port
        self._clock = clock
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self.driver: EngineDriver | None = None
        self.app: SimApp | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine(self) -> Engine:
        if self.driver is None:
            raise RuntimeError("server not started")
        return self.driver.engine

    def set_faults(self, faults: Faults) -> None:
        if self.app is None:
            raise RuntimeError("server not started")
        self.app.set_faults(faults)

    async def start(self) -> str:
        profile = self.config.profile
        model = self.config.served_model
        metrics = SimMetrics(profile, model)
        engine = Engine(profile, random.Random(profile.seed))
        self.driver = EngineDriver(engine, metrics, self._clock)
        self.app = SimApp(profile, model, self.driver, profile.seed)
        self.app.set_faults(self.config.faults)
        self.driver.start()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.set_inheritable(True)
        self._socket = sock
        self.port = sock.getsockname()[1]
        uv_config = uvicorn.Config(
            self.app,
            http="httptools",
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=30,
            backlog=4096,
        )
        self._server = _Server(uv_config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        ready = asyncio.get_running_loop().create_task(self._server.ready.wait())
        done, _ = await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            await self._task  # raises what went wrong
            raise RuntimeError("server exited during startup")
        return self.url

    async def stop(self) -> None:
        if self.driver is not None:
            # Hung handlers wait for a reset; release them so shutdown does not wait forever.
            if self.app is not None:
                self.app.set_faults(Faults())
            await self.driver.stop()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._socket is not None:
            self._socket.close()
        self._server = self._task = self._socket = None

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
