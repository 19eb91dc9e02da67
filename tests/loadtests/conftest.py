"""The load-test suite imports the loadtests/ modules by plain name, as Locust does, and tests/procs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

for path in (ROOT / "loadtests", ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
