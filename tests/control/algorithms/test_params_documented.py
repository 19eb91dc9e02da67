"""Every parameter of the `sla` and `goodput` algorithms is in the config reference, at its default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gateway.control.algorithms.goodput.params import GoodputParams
from gateway.control.algorithms.sla.params import SLAParams

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def documented(heading: str) -> dict[str, float]:
    """The `| \\`name\\` | default |` rows of the table under `heading` in docs/configuration.md."""
    text = REFERENCE.read_text()
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) \|", section, re.M)
    return {name: float(default) for name, default in rows}


@pytest.mark.parametrize(
    ("heading", "params"),
    [("#### The `sla` algorithm", SLAParams), ("#### `goodput`", GoodputParams)],
)
def test_the_reference_lists_each_parameter_at_its_default(
    heading: str, params: type[SLAParams] | type[GoodputParams]
) -> None:
    shipped = {}
    for f in dataclasses.fields(params):
        assert isinstance(f.default, int | float), f.name
        shipped[f.name] = float(f.default)
    assert documented(heading) == shipped
