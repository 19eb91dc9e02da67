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

PROFILE_HELP = {
    "block_size": "tokens per KV-cache block (vLLM --block-size)",
    "num_gpu_blocks": "KV-cache blocks; times block_size is the KV capacity in tokens",
    "max_num_seqs": "most sequences in one engine step (vLLM --max-num-seqs)",
    "max_num_batched_tokens": "most tokens computed in one step (vLLM --max-num-batched-tokens)",
    "max_model_len": "longest prompt plus output, in tokens; longer requests get 400",
    "enable_prefix_caching": "share the KV blocks of identical prompt prefixes, as vLLM does by default",
    "step_base": "seconds every engine step costs regardless of work (T0)",
    "step_mem": "seconds of the memory-bound floor of a step: reading the weights (T_mem)",
    "step_per_token": "seconds per token computed in a step (alpha)",
    "step_per_kv_token": "seconds per context token attended in a step (beta)",
    "step_per_seq": "seconds per sequence in a step: sampling and bookkeeping (gamma)",
    "frontend_overhead": "seconds the API server spends on each request, all in parallel, before the engine",
    "frontend_busy": "seconds the API server spends on each request one at a time (a CPU-starved front end)",
    "stream_burst": "tokens written to a stream at once (1: each token as it is made)",
    "bytes_per_token": "characters of text per token, for counting prompt tokens",
    "chat_tokens_per_message": "template tokens added per chat message",
    "chat_tokens_base": "template tokens added per chat request",
    "output_mu": "mean of log(output length) when ignore_eos is not set (median e^mu tokens)",
    "output_sigma": "spread of log(output length); 0 makes every output e^mu tokens",
    "embedding_dim": "length of each vector /v1/embeddings returns",
    "seed": "random seed for output lengths and text",
}
"""Help for each profile parameter's flag; the defaults shown are the chosen profile's."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default %(default)s)")
    parser.add_argument(
        "--profile",
        default="tiny-cpu",
        choices=profile_names(),
        help="engine and GPU to imitate (default %(default)s)",
    )
    parser.add_argument("--model", default=None, help="served model name (default: the profile's)")
    group = parser.add_argument_group("profile overrides (default: the profile's value)")
    for f in dataclasses.fields(Profile):
        if f.name in ("name", "model"):
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            group.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, help=PROFILE_HELP[f.name]
            )
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            group.add_argument(flag, dest=f.name, type=kind, default=None, help=PROFILE_HELP[f.name])
    faults = parser.add_argument_group("faults (also changeable at run time: POST /sim/faults)")
    faults.add_argument(
        "--speed", type=float, default=1.0, help="engine pace; 0.5 is half as fast (default 1)"
    )
    faults.add_argument(
        "--error-rate",
        type=float,
        default=0.0,
        help="share of inference requests answered with an error (0..1)",
    )
    faults.add_argument(
        "--error-status", type=int, default=500, help="status of those errors (default %(default)s)"
    )
    faults.add_argument(
        "--frontend-delay",
        type=float,
        default=0.0,
        help="extra seconds the API server holds every request before the engine sees it",
    )
    faults.add_argument("--hang", action="store_true", help="accept requests and never answer them")
    faults.add_argument(
        "--max-num-queued-reqs",
        type=int,
        default=0,
        help="as vLLM 0.32's flag: more unfinished requests than this get 503 'engine busy' (0: no cap)",
    )
    faults.add_argument(
        "--die", action="store_true", help="drop every connection without an answer, as a crashed server"
    )


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
