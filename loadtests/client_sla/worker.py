"""The vllm bench serve process (loadtests/client_sla/client.py in the vLLM environment), driven
one run at a time over its stdin, its other output kept in a log file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import IO, Any

CLIENT = Path(__file__).with_name("client.py")
MARK = "@@client_sla "


class ClientError(RuntimeError):
    """The client stopped, or answered a job with an error."""


class Worker:
    def __init__(self, python: Path, log: Path) -> None:
        self._log: IO[str] = open(log, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        self._proc = subprocess.Popen(
            [str(python), "-u", str(CLIENT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(MARK):
                answer: dict[str, Any] = json.loads(line[len(MARK) :])
                if "error" in answer:
                    raise ClientError(answer["error"])
                return answer
            self._log.write(line)
        raise ClientError(f"the client exited with {self._proc.wait()}")

    def ask(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._log.write(f"\n### {json.dumps(job)}\n")
        self._log.flush()
        self._proc.stdin.write(json.dumps(job) + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
