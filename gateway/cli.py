"""`llm-gateway`: the command line. A subcommand's modules are imported only when it runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    from gateway.config import GatewayConfig
    from gateway.config.source import ConfigSource

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

_ALGORITHMS = ("sla", "aimd", "gradient", "fixed")

BACKENDS_ENV = "LLM_GATEWAY_BACKENDS"
"""Backend URLs for `serve` when no --backend is given (spaces or commas between): how a container
image with a built-in config is pointed at its backends."""

_DESCRIPTION = """\
An OpenAI-compatible gateway for vLLM that keeps each model's latency within its SLA by adapting
how many requests reach each backend, and refuses the excess at once with 429/503 answers the OpenAI
SDK understands. `llm-gateway COMMAND --help` lists a command's flags.
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-gateway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _add_gateway_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8080)")
    p.add_argument(
        "--sla-ttft-p90",
        type=float,
        metavar="SECONDS",
        help="P90 time-to-first-token target (default 1.0 when no SLA is given)",
    )
    p.add_argument("--sla-tpot-p90", type=float, metavar="SECONDS", help="P90 time-per-output-token target")
    p.add_argument("--sla-e2e-p90", type=float, metavar="SECONDS", help="P90 end-to-end latency target")
    p.add_argument("--algorithm", choices=_ALGORITHMS, help="concurrency limit algorithm (default sla)")
    from gateway.config.control import QueueConfig

    queue = QueueConfig()
    p.add_argument(
        "--max-queue",
        type=int,
        metavar="N",
        help=f"admission queue bound per model (default {queue.max_depth}; config queue.max_depth)",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        metavar="SECONDS",
        help=f"longest a request may wait in the queue (default {queue.timeout:g}; config queue.timeout)",
    )
    p.add_argument(
        "--data-dir",
        metavar="PATH",
        help="directory for the Files and Batches API's database and files (config batch.data_dir)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="least severe log lines written to stderr (default %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-gateway", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    _add_demo(sub)
    _add_check_config(sub)

    from gateway.sim import cli as sim_cli

    sim_cli.configure_parser(
        sub.add_parser(
            "sim", help="one simulated vLLM server: continuous batching, paged KV cache, vLLM's metrics"
        )
    )
    return parser


def _add_serve(sub: Subparsers) -> None:
    serve = sub.add_parser(
        "serve", help="run the gateway in front of vLLM servers (--config FILE or --backend URL ...)"
    )
    serve.add_argument("--config", metavar="PATH", help="YAML config file (see config/gateway.yaml)")
    serve.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="URL",
        help="a vLLM server's root URL (http://host:8000, no /v1); repeat for several. Replaces the "
        f"file's backends. Default: the URLs in ${BACKENDS_ENV}, if set",
    )
    serve.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis shared by every process and replica (config state.redis_url; redis://, rediss://, "
        "unix://, redis+sentinel://)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="gateway processes on this port (N > 1 needs a Redis)",
    )
    _add_gateway_flags(serve)


def _add_demo(sub: Subparsers) -> None:
    demo = sub.add_parser(
        "demo", help="the gateway in front of two simulated vLLM servers on localhost; no GPU needed"
    )
    _add_gateway_flags(demo)
    demo.add_argument(
        "--profile", default="gemma3-4b-rtx4080", help="simulator profile (see `llm-gateway sim --help`)"
    )
    demo.add_argument("--model", help="model name the backends serve (default: the profile's)")


def _add_check_config(sub: Subparsers) -> None:
    check = sub.add_parser(
        "check-config", help="validate a config file (exit 2 on problems); --probe asks each backend"
    )
    check.add_argument("path", help="YAML config file")
    check.add_argument(
        "--probe",
        action="store_true",
        help="also ask each backend what it is (/health, /version, /v1/models, /metrics); exit 1 "
        "if one is unreachable or unusable",
    )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config mapping fragments that command-line flags set."""
    out: dict[str, Any] = {}
    if args.host is not None or args.port is not None:
        out["listen"] = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    sla = {
        k: v
        for k, v in (
            ("ttft_p90", args.sla_ttft_p90),
            ("tpot_p90", args.sla_tpot_p90),
            ("e2e_p90", args.sla_e2e_p90),
        )
        if v is not None
    }
    if sla:
        out["sla"] = sla
    if args.algorithm is not None:
        out["controller"] = {"algorithm": args.algorithm}
    queue = {
        k: v for k, v in (("max_depth", args.max_queue), ("timeout", args.queue_timeout)) if v is not None
    }
    if queue:
        out["queue"] = queue
    if args.data_dir is not None:
        out["batch"] = {"data_dir": args.data_dir}
    return out


def _serve(args: argparse.Namespace) -> int:
    from gateway.app import create_app
    from gateway.config import ConfigError
    from gateway.config.source import ConfigSource
    from gateway.server.serve import run

    extra = overrides(args)
    backends = list(args.backend) or os.environ.get(BACKENDS_ENV, "").replace(",", " ").split()
    if backends:
        extra["backends"] = backends
    if args.redis_url:
        extra["state"] = {"redis_url": args.redis_url}
    source = ConfigSource(args.config, extra)
    try:
        config = source.load()
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"llm-gateway: {problem}", file=sys.stderr)
        if not backends and any(p.startswith("backends:") for p in exc.problems):
            print(
                f"llm-gateway: give backends in the file, with --backend URL, or in ${BACKENDS_ENV}",
                file=sys.stderr,
            )
        return 2
    if args.workers != 1:
        return _serve_workers(config, source, args)
    run(create_app(config, source=source), config, log_level=args.log_level)
    return 0


def _serve_workers(config: GatewayConfig, source: ConfigSource, args: argparse.Namespace) -> int:
    from gateway.server.workers import Supervisor

    if args.workers < 1:
        print(f"llm-gateway: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    if config.state.redis_url is None:
        print(
            f"llm-gateway: --workers {args.workers} needs shared state: give --redis-url URL or "
            "state.redis_url (each worker alone would admit the whole limit)",
            file=sys.stderr,
        )
        return 2
    if config.batch.enabled:
        print(
            f"llm-gateway: --workers {args.workers} cannot share batch.data_dir: run the Batch API "
            "in a gateway process of its own (each worker would resume every unfinished batch)",
            file=sys.stderr,
        )
        return 2
    try:
        return Supervisor(config, source, args.workers, args.log_level).run()
    except OSError as exc:
        print(f"llm-gateway: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1


def _check_config(args: argparse.Namespace) -> int:
    from gateway.config import ConfigError, load_config

    try:
        config = load_config(args.path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{args.path}: {problem}" if not problem.startswith(args.path) else problem)
        return 2
    print(
        f"{args.path}: OK ({len(config.backends)} backends, algorithm "
        f"{config.controller.algorithm}, SLA {config.sla.targets()})"
    )
    return _probe(config) if args.probe else 0


def _probe(config: GatewayConfig) -> int:
    import asyncio

    from gateway.pool.probe import probe_all

    reports = asyncio.run(probe_all(config.backends, seconds=config.timeouts.connect))
    for report in reports:
        print("\n".join(report.lines()))
    return 1 if any(not r.reachable for r in reports) else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "check-config":
        return _check_config(args)
    if args.command == "demo":
        from gateway.demo import run_demo

        return run_demo(args, overrides(args))
    if args.command == "sim":
        from gateway.sim import cli as sim_cli

        return sim_cli.run(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
