"""`llm-gateway demo`: two simulated vLLM servers and the gateway in front of them, in one process.

The default profile models Gemma-3-4B on an RTX 4080: an 11,824-token KV cache that a modest
load test fills, so the controller, the queue and the alerts all have something to do. The Files and
Batches API keeps its state in a temporary directory (removed at exit) unless `--data-dir` is given.
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

from gateway.app import create_app
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.server.serve import serve
from gateway.sim.profiles import get_profile
from gateway.sim.server import SimConfig, SimServer

BACKEND_PORTS = (8001, 8002)
"""Where config/prometheus.yml expects the backends; a taken port falls back to a free one."""


def banner(config: GatewayConfig, model: str, sims: list[SimServer]) -> str:
    base = f"http://{config.host}:{config.port}/v1"
    lines = [
        "",
        f"llm-gateway demo: gateway on {base}, {len(sims)} simulated vLLM backends serving {model!r}:",
        *(f"  backend {s.url}" for s in sims),
        "",
        "Point any OpenAI client at it:",
        "",
        "  from openai import OpenAI",
        f'  client = OpenAI(base_url="{base}", api_key="unused")',
        f'  stream = client.chat.completions.create(model="{model}", stream=True,',
        '      messages=[{"role": "user", "content": "Hello!"}])',
        "  for chunk in stream:",
        '      print(chunk.choices[0].delta.content or "", end="", flush=True)',
        "",
        f"State: curl http://{config.host}:{config.port}/admin/state   "
        f"Metrics: curl http://{config.host}:{config.port}/metrics",
        "Load test: see README (make loadtest).  Stop: Ctrl-C",
        "",
    ]
    return "\n".join(lines)


async def _run(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    profile = get_profile(args.profile)
    model = args.model or profile.model
    sims: list[SimServer] = []
    scratch = tempfile.TemporaryDirectory(prefix="llm-gateway-demo-")
    try:
        for i, port in enumerate(BACKEND_PORTS):
            sim_config = SimConfig(profile=profile.override({"seed": profile.seed + i}), model=model)
            sim = SimServer(sim_config, port=port)
            try:
                await sim.start()
            except OSError:
                await sim.stop()
                sim = SimServer(sim_config, port=0)
                await sim.start()
            sims.append(sim)
        base = {"backends": [s.url for s in sims], "shutdown_grace": 5.0, "batch": {"data_dir": scratch.name}}
        try:
            # The flags set listen, sla, controller, queue and batch, never backends.
            config = parse_config({**base, **overrides})
        except ConfigError as exc:
            for problem in exc.problems:
                print(f"llm-gateway: {problem}")
            return 2
        print(banner(config, model, sims), flush=True)
        await serve(create_app(config), config, log_level=args.log_level)
    finally:
        for sim in sims:
            await sim.stop()
        scratch.cleanup()
    return 0


def run_demo(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    import uvloop

    try:
        return uvloop.run(_run(args, overrides))
    except KeyboardInterrupt:
        return 0
