"""Real Locust runs as subprocesses, and their CSVs."""

from __future__ import annotations

import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "loadtests" / "locustfile.py"


@dataclass(frozen=True)
class LocustRun:
    prefix: Path
    popen: subprocess.Popen[bytes]
    log: Path

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.popen.wait(timeout)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait(5)

    @property
    def stats(self) -> Path:
        return Path(f"{self.prefix}_stats.csv")

    def rows(self) -> dict[tuple[str, str], dict[str, str]]:
        with self.stats.open(newline="") as f:
            return {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_locust(host: str, prefix: Path, *args: str) -> LocustRun:
    """Start a headless Locust run in the background; wait() on the result to finish it."""
    log = Path(f"{prefix}.log")
    cmd = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "-H", host,
        "--headless", "--only-summary", "--csv", str(prefix), "--loglevel", "INFO", *args,
    ]  # fmt: skip
    with log.open("wb") as out:
        popen = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return LocustRun(prefix, popen, log)
