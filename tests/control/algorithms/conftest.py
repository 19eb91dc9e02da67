from __future__ import annotations

import pytest
from limits_helpers import ObsFactory, make_obs


@pytest.fixture
def obs() -> ObsFactory:
    return make_obs
