"""`llm-gateway sim`: run a simulated vLLM server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys

from gateway.sim.faults import Faults
from gateway.sim.profiles import Profile, get_profile, profile_names
from gateway.sim.server import SimConfig, SimServer

_FAULT_FLAGS = (
    *("speed", "error_rate", "error_status", "frontend_delay", "hang", "die"),
    "max_num_queued_reqs",
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--profile", default="tiny-cpu", choices=profile_names())
    parser.add_argument("--model", default=None, help="served model name (default: the profile's)")
    group = parser.add_argument_group("profile overrides")
    for f in dataclasses.fields(Profile):
        if f.name in ("name", "model"):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            group.add_argument(flag, dest=f.name, type=kind, default=None)
    faults = parser.add_argument_group("faults (also changeable at run time: POST /sim/faults)")
    faults.add_argument("--speed", type=float, default=1.0, help="0.5 = half as fast")
    faults.add_argument("--error-rate", type=float, default=0.0)
    faults.add_argument("--error-status", type=int, default=500)
    faults.add_argument(
        "--frontend-delay",
        type=float,
        default=0.0,
        help="extra seconds the API server holds every request before the engine sees it",
    )
    faults.add_argument("--hang", action="store_true")
    faults.add_argument(
        "--max-num-queued-reqs",
        type=int,
        default=0,
        help="as vLLM 0.32's flag: more unfinished requests than this get 503 'engine busy' (0: no cap)",
    )
    faults.add_argument("--die", action="store_true")


def build_config(args: argparse.Namespace) -> SimConfig:
    overrides = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(Profile)
        if f.name not in ("name", "model") and getattr(args, f.name, None) is not None
    }
    faults = Faults(**{name: getattr(args, name) for name in _FAULT_FLAGS})
    return SimConfig(profile=get_profile(args.profile, **overrides), model=args.model, faults=faults)


async def serve(config: SimConfig, host: str, port: int) -> None:
    server = SimServer(config, host=host, port=port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    url = await server.start()
    p = config.profile
    print(
        f"sim: {config.served_model} ({p.name}) at {url}: {p.num_gpu_blocks} blocks of "
        f"{p.block_size}, max_num_seqs {p.max_num_seqs}, max_model_len {p.max_model_len}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await server.stop()


def run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except (KeyError, ValueError) as exc:
        print(f"llm-gateway sim: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:  # pragma: no cover - platforms without uvloop
        asyncio.run(serve(config, args.host, args.port))
    else:
        uvloop.run(serve(config, args.host, args.port))
    return 0
