"""The scenarios (a)-(f), the simulated backends they run on, the SLA, and the modes compared.

Backends: two simulated vLLM servers, profile `tiny-cpu` (fitted to a real vLLM CPU engine: 8,192
KV tokens, max_num_seqs 32) with every step-time term tripled, i.e. a CPU three times slower. At the
standard workload (prompt ~200, output ~64 tokens) one server peaks near 10.5 requests/s and 700
output tokens/s, so two serve about 21 requests/s; the token streams of the whole run then stay near
1,400 SSE chunks/s, which one Python load generator, the gateway and the servers can carry on two
cores without the client becoming the bottleneck.

The SLA, as the client sees it, is per request: first token within 2.0 s and a mean time per output
token of at most 30 ms (33 tokens/s, faster than anyone reads). TPOT is the one that bites: on this
engine it rises from 11 ms with 4 requests in the batch to 26 ms at 20 and 46 ms at 32, while the
throughput gained past 16-20 is small; TTFT bites when work queues, in vLLM or in the gateway. The
gateway is told the same TPOT target and splits the 2 s first-token budget: 1 s of queueing in the
gateway (queue timeout) and a 1 s TTFT P90 target measured from dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtests.lengths import Lengths, parse_lengths
from loadtests.scenarios.loadgen import RetryPolicy, Workload

PROFILE = "tiny-cpu"
STEP_SCALE = 3.0
STEP_FIELDS = {
    "step-base": 0.0003,
    "step-mem": 0.002,
    "step-per-token": 0.02e-3,
    "step-per-kv-token": 0.32e-6,
    "step-per-seq": 0.238e-3,
}
CAPACITY_RPS = 21.0
"""Requests/s the two backends serve at the standard workload (measured: direct closed loop)."""

SLA_TTFT = 2.0
SLA_TPOT = 0.030
GATEWAY_SLA = {"ttft_p90": 1.0, "tpot_p90": SLA_TPOT}
QUEUE_TIMEOUT = 1.0
FIXED_SWEEP = (8, 16, 24)


def sim_args(seed: int) -> list[str]:
    args = ["--profile", PROFILE, "--seed", str(seed)]
    for flag, value in STEP_FIELDS.items():
        args += [f"--{flag}", repr(value * STEP_SCALE)]
    return args


def lengths(spec: str) -> Lengths:
    return parse_lengths(spec)


STANDARD = Workload(
    prompt=lengths("lognormal:mean=200,sigma=0.5,max=700"),
    output=lengths("lognormal:mean=64,sigma=0.5,max=256"),
)


@dataclass(frozen=True, slots=True)
class Stream:
    """One source of load: `open` (Poisson at `rate`/s), `closed` (`users`) or `burst` (`count`)."""

    workload: Workload
    kind: str = "open"
    rate: float = 0.0
    users: int = 0
    count: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    at: float
    faults: dict[str, object]
    backend: int | None = None
    """Index of the backend to change; None: all of them."""
    label: str = ""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    duration: float
    streams: tuple[Stream, ...]
    phases: tuple[tuple[float, str], ...] = ((0.0, "steady"),)
    events: tuple[Event, ...] = ()
    tenants: tuple[dict[str, object], ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    drain: float | None = None
    """Seconds to wait for open requests once the load stops (None: `drain_seconds`'s default)."""
    request_timeout: float = 30.0

    @property
    def drain_seconds(self) -> float:
        """The drain time: by default the longest a request that meets the SLA can take (first
        token at the TTFT limit, then the longest output at the TPOT limit) and a second more, so
        that no request that could still meet the SLA is cut off and counted unfinished."""
        if self.drain is not None:
            return self.drain
        longest = max(s.workload.output.upper for s in self.streams)
        return SLA_TTFT + SLA_TPOT * longest + 1.0

    def scaled(self, factor: float) -> Scenario:
        """The same scenario with every time shortened by `factor` (for --quick)."""
        return Scenario(
            name=self.name,
            title=self.title,
            duration=self.duration * factor,
            streams=self.streams,
            phases=tuple((at * factor, label) for at, label in self.phases),
            events=tuple(Event(e.at * factor, e.faults, e.backend, e.label) for e in self.events),
            tenants=self.tenants,
            retry=self.retry,
            drain=self.drain,
            request_timeout=self.request_timeout,
        )


def _tenant(name: str, key: str) -> Workload:
    return Workload(STANDARD.prompt, STANDARD.output, tenant=name, api_key=key)


def scenarios() -> dict[str, Scenario]:
    """Scenarios (a)-(f) by name, in that order."""
    return {s.name: s for s in (*_capacity_scenarios(CAPACITY_RPS), *_mix_scenarios(CAPACITY_RPS))}


def _capacity_scenarios(c: float) -> tuple[Scenario, ...]:
    """(a)-(d): the standard workload in overload, through a capacity drop, a dead backend and a burst."""
    return (
        Scenario(
            "a-overload",
            "(a) steady overload at 3x capacity",
            30.0,
            (Stream(STANDARD, "open", rate=3 * c),),
        ),
        Scenario(
            "b-halve",
            "(b) capacity halves (speed 0.5) at 15 s, recovers at 30 s",
            45.0,
            (Stream(STANDARD, "open", rate=1.5 * c),),
            phases=((0.0, "full"), (15.0, "half"), (30.0, "recovered")),
            events=(
                Event(15.0, {"speed": 0.5}, None, "speed 0.5"),
                Event(30.0, {"reset": True}, None, "speed 1"),
            ),
        ),
        Scenario(
            "c-failover",
            "(c) one of two backends dies at 15 s, comes back at 30 s",
            45.0,
            (Stream(STANDARD, "open", rate=1.2 * c),),
            phases=((0.0, "both"), (15.0, "one dead"), (30.0, "back")),
            events=(
                Event(15.0, {"die": True}, 1, "b1 dies"),
                Event(30.0, {"reset": True}, 1, "b1 back"),
            ),
        ),
        Scenario(
            "d-burst",
            "(d) 5,000 requests at once",
            30.0,
            (Stream(STANDARD, "burst", count=5000),),
            drain=0.0,
        ),
    )


def _mix_scenarios(c: float) -> tuple[Scenario, ...]:
    """(e)-(f): workloads of different sizes side by side, and tenants side by side."""
    short = Workload(
        prompt=lengths("lognormal:mean=60,sigma=0.6,max=400"),
        output=lengths("lognormal:mean=24,sigma=0.6,max=128"),
        tenant="short",
    )
    long = Workload(
        prompt=lengths("lognormal:mean=550,sigma=0.3,max=720"),
        output=lengths("lognormal:mean=180,sigma=0.3,max=280"),
        tenant="long",
    )
    return (
        Scenario(
            "e-mix",
            "(e) mix of short and long prompts and outputs",
            30.0,
            (Stream(short, "open", rate=1.2 * c), Stream(long, "open", rate=0.2 * c)),
        ),
        Scenario(
            "f-tenants",
            "(f) two tenants, one flooding",
            30.0,
            (
                Stream(_tenant("interactive", "key-interactive"), "open", rate=0.8 * c),
                Stream(_tenant("flood", "key-flood"), "open", rate=3 * c),
            ),
            tenants=(
                {"name": "interactive", "api_keys": ["key-interactive"], "weight": 1},
                {"name": "flood", "api_keys": ["key-flood"], "weight": 1},
            ),
        ),
    )


def modes(algorithms: tuple[str, ...] = ("sla",), sweep: tuple[int, ...] = FIXED_SWEEP) -> list[str]:
    """`direct`, then `fixed-N` for each N, then the adaptive algorithms by name."""
    return ["direct", *(f"fixed-{n}" for n in sweep), *algorithms]


def gateway_config(
    mode: str,
    backend_urls: list[str],
    scenario: Scenario,
    params: dict[str, object] | None = None,
    controller: dict[str, object] | None = None,
) -> dict[str, object]:
    """The gateway's config for `mode` (`fixed-N` or an algorithm name): shipped defaults otherwise.

    `controller` adds keys of the config's `controller` section (interval, window_seconds,
    min_samples) to explore the loop's own settings.
    """
    if mode.startswith("fixed-"):
        algorithm, algo_params = "fixed", {"limit": int(mode.split("-", 1)[1])}
    else:
        algorithm, algo_params = mode, dict(params or {})
    config: dict[str, object] = {
        "backends": [
            {"url": url, "name": f"b{i}", "min_concurrency": 1, "max_concurrency": 64}
            for i, url in enumerate(backend_urls)
        ],
        "sla": dict(GATEWAY_SLA),
        "controller": {**(controller or {}), "algorithm": algorithm, "params": algo_params},
        "queue": {"max_depth": 1024, "timeout": QUEUE_TIMEOUT},
    }
    if scenario.tenants:
        config["tenants"] = [dict(t) for t in scenario.tenants]
    return config
