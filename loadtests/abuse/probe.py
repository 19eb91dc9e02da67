"""/health probes from a process of their own: every PROBE_INTERVAL a new connection sends
`GET /health`; the time to the whole answer, or PROBE_TIMEOUT for a probe that failed or took
longer (an answer other than 200 fails too).

`python -m loadtests.abuse.probe PORT` probes until SIGTERM, then prints
`{"probes": [...], "probe_failures": N}`. It imports nothing but the standard library, so that it
starts probing at once even on a loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

PROBE_TIMEOUT = 2.0
PROBE_INTERVAL = 0.05


async def probe_until_stopped(port: int, stop: asyncio.Event) -> tuple[list[float], int]:
    probes: list[float] = []
    failures = 0
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
                answer = await reader.read()
                writer.close()
            healthy = answer.startswith(b"HTTP/1.1 200")
        except (OSError, TimeoutError):
            healthy = False
        elapsed = time.perf_counter() - started
        probes.append(elapsed if healthy else max(elapsed, PROBE_TIMEOUT))
        failures += not healthy
        await asyncio.sleep(PROBE_INTERVAL)
    return probes, failures


def main() -> None:
    port = int(sys.argv[1])

    async def run() -> tuple[list[float], int]:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        return await probe_until_stopped(port, stop)

    probes, failures = asyncio.run(run())
    print(json.dumps({"probes": probes, "probe_failures": failures}))


if __name__ == "__main__":
    main()
