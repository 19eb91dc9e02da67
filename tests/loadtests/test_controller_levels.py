"""The evaluation's workloads: SLA levels from unloaded and loaded P90s, a user's own workload spec."""

from __future__ import annotations

import math
import re

import pytest

from loadtests.closed_loop import TEMPLATE_MARGIN
from loadtests.controller.matrix import LEVELS, WORKLOADS, Workload, by_name, parse, targets

UNLOADED = {"ttft": 0.04, "tpot": 0.005, "e2e": 0.6}
LOADED = {"ttft": 3.0, "tpot": 0.040, "e2e": 9.0}


def test_loose_is_met_by_direct_infeasible_by_no_one_and_tight_lies_between() -> None:
    stream = by_name("chat-short")
    loose = targets(stream, "loose", UNLOADED, LOADED)
    tight = targets(stream, "tight", UNLOADED, LOADED)
    infeasible = targets(stream, "infeasible", UNLOADED, LOADED)
    assert loose == pytest.approx({"ttft": 4.5, "tpot": 0.060})
    assert tight == pytest.approx({"ttft": math.sqrt(0.12), "tpot": math.sqrt(0.0002)})
    assert infeasible == pytest.approx({"ttft": 0.02, "tpot": 0.0025})
    for signal in ("ttft", "tpot"):
        assert infeasible[signal] < UNLOADED[signal] < tight[signal] < LOADED[signal] < loose[signal]


def test_a_non_streaming_workload_is_judged_on_end_to_end_latency_only() -> None:
    nonstream = by_name("completions-nonstream")
    assert targets(nonstream, "loose", UNLOADED, LOADED) == pytest.approx({"e2e": 13.5})
    assert targets(nonstream, "tight", UNLOADED, LOADED) == pytest.approx({"e2e": math.sqrt(5.4)})


def test_a_signal_missing_from_either_measurement_gets_no_target() -> None:
    stream = by_name("chat-short")
    assert set(targets(stream, "tight", UNLOADED, {"ttft": 3.0})) == {"ttft"}
    assert all(targets(stream, level, {}, LOADED) == {} for level in LEVELS)


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_every_request_fits_the_engine_at_the_length_it_was_drawn_with(workload: Workload) -> None:
    longest = workload.prompt_tokens[1] + workload.output_tokens[1]
    assert longest + TEMPLATE_MARGIN <= 1024


def test_a_workload_spec_gives_every_field_and_defaults_the_rest() -> None:
    assert parse("rag:chat:stream:700-800:20-40:prefix=600:clients=32") == Workload(
        "rag", "chat", True, (700, 800), (20, 40), shared_prefix_tokens=600, clients=32
    )
    assert parse("batchy:completions:nonstream:300:500") == Workload(
        "batchy", "completions", False, (300, 300), (500, 500)
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("rag:chat:stream:700-800", "want NAME:ENDPOINT"),
        ("rag:embeddings:stream:700:20", "is not chat or completions"),
        ("rag:chat:sse:700:20", "is not stream or nonstream"),
        ("rag:chat:stream:800-700:20", "prompt '800-700'"),
        ("rag:chat:stream:700:0", "output '0'"),
        ("rag:chat:stream:700:20:clients=many", "is not prefix=N or clients=N"),
        ("rag:chat:stream:700:20:clients=0", "no clients"),
    ],
)
def test_a_malformed_workload_spec_says_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse(spec)
