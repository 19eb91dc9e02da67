from __future__ import annotations

import sys
from pathlib import Path

import pytest
from limits_helpers import ObsFactory, make_obs

# The closed-loop tests drive the benchmark's harness, which lives with the load tests.
LOADTESTS = Path(__file__).resolve().parents[2] / "loadtests"
if str(LOADTESTS) not in sys.path:
    sys.path.insert(0, str(LOADTESTS))


@pytest.fixture
def obs() -> ObsFactory:
    return make_obs
