from __future__ import annotations

from pathlib import Path

from loadtests.knee import LevelResult, StepRecorder, find_knee, render, within_sla, write_csv


def level(users: int, tokens_per_s: float, ttft_p90: float | None = None) -> LevelResult:
    return LevelResult(users, 10, 0, 0, 1.0, tokens_per_s, None, ttft_p90, None)


def test_knee_is_where_throughput_stops_scaling() -> None:
    # throughput of a saturating server: doubles until 8 users, then flat
    curve = [level(1, 100), level(2, 200), level(4, 400), level(8, 780), level(16, 800), level(32, 805)]
    knee = find_knee(curve)
    assert knee is not None and knee.users == 8


def test_linear_growth_has_no_knee() -> None:
    assert find_knee([level(u, 50.0 * u) for u in (1, 2, 4, 8)]) is None
    assert find_knee([level(1, 10), level(2, 20)]) is None  # too few levels


def test_largest_level_within_the_sla() -> None:
    curve = [level(1, 1, 0.2), level(2, 2, 0.4), level(4, 3, 1.5), level(8, 3, None)]
    best = within_sla(curve, 0.5)
    assert best is not None and best.users == 2
    assert within_sla(curve, 0.1) is None


def test_latency_by_start_and_throughput_by_delivery(tmp_path: Path) -> None:
    rec = StepRecorder([1, 2, 4], step_time=10.0)
    rec.request(1.0, e2e=2.0, failed=False)
    rec.first_token(1.0, 0.1)
    rec.output(3.0, 100)
    rec.request(8.0, e2e=4.0, failed=False)  # started under level 1, finished under level 2
    rec.output(12.0, 50)
    rec.request(12.0, e2e=3.0, failed=True)
    rec.shed(13.0)
    rec.request(40.0, e2e=1.0, failed=False)  # after the sweep: ignored
    results = rec.results()
    assert [r.users for r in results] == [1, 2]
    assert rec.unfinished() == [4]
    first, second = results
    assert first.tokens_per_s == 10.0 and first.ttft_p90 == 0.1 and first.e2e_p90 == 4.0
    assert (first.requests, first.e2e_p90) == (2, 4.0)
    assert (second.requests, second.failures, second.shed, second.e2e_p90) == (1, 1, 1, None)
    assert second.tokens_per_s == 5.0
    out = tmp_path / "steps.csv"
    write_csv(out, results)
    lines = out.read_text().splitlines()
    assert lines[0].startswith("users,requests,shed,failures,requests_per_s,tokens_per_s")
    assert len(lines) == 3
    assert "knee: none found" in render(results)
