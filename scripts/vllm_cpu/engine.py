"""Start a real vLLM OpenAI server on the CPU with a tiny random-weight Llama.

usage: python scripts/vllm_cpu/engine.py [--venv DIR] [--model-dir DIR] [--port N] [...]

Runs in the foreground until Ctrl-C. Standard library only, so the opt-in test suite can
import it from the gateway's own environment; the engine itself runs in the vLLM one
(scripts/vllm_cpu/install.sh).

The KV cache is made deliberately small: `--num-gpu-blocks-override 64` blocks of
`--block-size 128` tokens is 8,192 tokens, so a few dozen concurrent requests of a few
hundred tokens fill it, and the engine queues and preempts as a loaded GPU server does.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "llm-gateway"


class EngineError(RuntimeError):
    """The engine exited or did not become ready in time."""


@dataclass(frozen=True)
class EngineSettings:
    venv: Path = CACHE / "vllm-venv"
    model_dir: Path = CACHE / "tiny-llama"
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str = "tiny-llama"
    num_gpu_blocks: int = 64
    block_size: int = 128
    max_model_len: int = 1024
    max_num_seqs: int = 32
    # On the CPU backend this is the fraction of the NUMA node's memory the engine reserves
    # (it refuses to start when that much is not free); the tiny model needs very little.
    memory_fraction: float = 0.2
    hidden_size: int = 768
    layers: int = 4
    # Scheduling niceness of every engine process (0: as started). A CPU engine keeps every
    # core busy, and at the same priority it starves the processes that share its host.
    nice: int = 0
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


def write_model(settings: EngineSettings) -> None:
    """(Re)write the tiny model directory: it takes a second and keeps it in step with the
    writer script."""
    subprocess.run(
        [
            str(settings.python),
            str(HERE / "make_tiny_model.py"),
            str(settings.model_dir),
            "--hidden-size",
            str(settings.hidden_size),
            "--layers",
            str(settings.layers),
        ],
        check=True,
    )


def command(settings: EngineSettings) -> list[str]:
    # `python -m` rather than the `vllm` script: the script looks up a distribution named
    # `vllm`, and this one is installed as `vllm-cpu`.
    niced = ["nice", "-n", str(settings.nice)] if settings.nice else []
    return [
        *niced,
        str(settings.python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(settings.model_dir),
        "--served-model-name",
        settings.served_model_name,
        "--host",
        settings.host,
        "--port",
        str(settings.port),
        "--load-format",
        "dummy",
        "--num-gpu-blocks-override",
        str(settings.num_gpu_blocks),
        "--block-size",
        str(settings.block_size),
        "--max-model-len",
        str(settings.max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--gpu-memory-utilization",
        str(settings.memory_fraction),
        "--uvicorn-log-level",
        "warning",
        *settings.extra_args,
    ]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    # Everything is local: never reach for the Hugging Face hub or send usage reports.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    return env


def start(settings: EngineSettings, log: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """Start the engine in its own session (it forks an engine-core child), at `settings.nice`."""
    write_model(settings)
    proc = subprocess.Popen(
        command(settings),
        env=environment(),
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        start_new_session=True,
    )
    if settings.nice:
        renice_session(proc.pid, settings.nice)
    return proc


def renice_session(pid: int, nice: int) -> None:
    """Give the session that `pid` leads the niceness `nice` where the kernel groups sessions.

    With the kernel's autogroup scheduling (Linux, `kernel.sched_autogroup_enabled`), every session
    shares the CPU as one: a process's own niceness ranks it only within its session, so the
    engine, alone in its session, would keep its share against the gateway's however niced. The
    session's niceness is what ranks it against the others. Without autogroups there is no file to
    write, and the processes' own niceness (`command`) is what counts; where the kernel refuses the
    write, that is said and the engine starts all the same.
    """
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except FileNotFoundError:
        pass
    except OSError as error:
        print(
            f"the engine's session keeps its niceness ({error}); its processes' own is {nice}",
            file=sys.stderr,
        )


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0


def wait_ready(settings: EngineSettings, proc: subprocess.Popen[bytes], timeout: float = 600.0) -> float:
    """Block until /health is 200 and /v1/models answers; return the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        code = proc.poll()
        if code is not None:
            raise EngineError(f"vLLM exited with status {code} before it was ready")
        if _get(settings.base_url + "/health") == 200 and (_get(settings.base_url + "/v1/models") == 200):
            return time.monotonic() - started
        time.sleep(1.0)
    raise EngineError(f"vLLM not ready after {timeout:.0f} s at {settings.base_url}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM the engine's process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        proc.wait(timeout=timeout)


def parse_args(argv: list[str]) -> EngineSettings:
    defaults = EngineSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=defaults.venv)
    parser.add_argument("--model-dir", type=Path, default=defaults.model_dir)
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--served-model-name", default=defaults.served_model_name)
    parser.add_argument("--num-gpu-blocks", type=int, default=defaults.num_gpu_blocks)
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    parser.add_argument("--memory-fraction", type=float, default=defaults.memory_fraction)
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--nice", type=int, default=defaults.nice, help="the engine's niceness")
    args, extra = parser.parse_known_args(argv)
    return EngineSettings(
        venv=args.venv,
        model_dir=args.model_dir,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        num_gpu_blocks=args.num_gpu_blocks,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        memory_fraction=args.memory_fraction,
        hidden_size=args.hidden_size,
        layers=args.layers,
        nice=args.nice,
        extra_args=tuple(extra),
    )


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    settings = parse_args(argv)
    # The engine runs in its own session, so a terminal's Ctrl-C reaches only this process;
    # `finally` below stops the engine on Ctrl-C and on SIGTERM alike.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    proc = start(settings)
    try:
        seconds = wait_ready(settings, proc)
        print(
            f"\nvLLM is ready at {settings.base_url} after {seconds:.0f} s "
            f"(model {settings.served_model_name!r}, KV cache {settings.kv_tokens} tokens, "
            f"max {settings.max_num_seqs} running).\n"
            f"Point the gateway at it:\n"
            f"    llm-gateway serve --backend {settings.base_url}\n"
            f"Press Ctrl-C to stop the engine.\n",
            flush=True,
        )
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop(proc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
