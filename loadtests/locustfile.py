"""Locust load test for OpenAI-compatible LLM servers: the gateway, vLLM, or any server of that API.

    locust -f loadtests/locustfile.py -H http://127.0.0.1:8080          # web UI on :8089 (from the repo root)
    locust -f loadtests/locustfile.py -H URL --headless -u 16 -t 60s \
        --csv results/run --html results/run.html

Every user is a closed loop: send a request, read the answer to the end, (optionally think), repeat.
Requests are drawn from ``--mix`` (kinds ``chat-stream``, ``chat``, ``completion-stream``,
``completion`` with weights); prompt and output lengths from ``--prompt-tokens`` and
``--output-tokens`` (see lengths.py). Besides Locust's own rows (request type POST, response time =
the whole request), each request adds custom rows to the statistics, with Locust's percentiles:

- ``TTFT``         time to first content token, ms (streaming kinds)
- ``TPOT``         time per output token after the first, ms (streaming kinds)
- ``tokens_per_s`` output tokens / request time, per request; its average content size is the mean
                   number of output tokens
- ``SHED``         a 429 or 503 answer that carried Retry-After: the server said "not now" on
                   purpose. Counted here, not as a failure; the user then waits the advised time.

Load shapes: ``--shape steady|step|spike|ramp`` (see shapes.py); ``step`` logs and writes the
per-level table with the knee of the throughput curve (``<csv prefix>_steps.csv``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from locust import LoadTestShape, events, task
from locust.contrib.fasthttp import FastHttpUser

from loadtests.knee import StepRecorder, render, write_csv
from loadtests.retry_after import retry_after_seconds
from loadtests.shapes import SHAPES, Schedule, Step, Target, build_schedule
from loadtests.streaming import StreamReader, Timings, completion_timings
from loadtests.workload import next_request, read_profile

__all__ = ["LLMUser", "SelectedShape"]

log = logging.getLogger("loadtests")

SHED_STATUSES = (429, 503)
MAX_BACKOFF_S = 30.0
MIX_HELP = "kinds=weights from chat-stream, chat, completion-stream, completion"
LENGTH_HELP = "fixed:N | uniform:LO,HI | lognormal:MEAN,SIGMA[,MAX] (tokens)"
PROMPT_DEFAULT = "lognormal:mean=200,sigma=0.5,max=2000"
OUTPUT_DEFAULT = "lognormal:mean=128,sigma=0.5,max=1024"


def add_arguments(parser: Any) -> None:
    # Arguments added to the parser itself (not to a group) also appear in the web UI.
    add = parser.add_argument
    add("--model", env_var="LLM_MODEL", default="", help="model; empty: the first of /v1/models")
    add("--api-key", env_var="OPENAI_API_KEY", default="", is_secret=True, help="Bearer token")
    add("--mix", env_var="LLM_MIX", default="chat-stream=3,completion=1", help=MIX_HELP)
    add("--prompt-tokens", env_var="LLM_PROMPT_TOKENS", default=PROMPT_DEFAULT, help=LENGTH_HELP)
    add("--output-tokens", env_var="LLM_OUTPUT_TOKENS", default=OUTPUT_DEFAULT, help=LENGTH_HELP)
    add("--no-ignore-eos", action="store_true", default=False, help="let outputs stop early")
    add("--think-time", type=float, default=0.0, help="seconds between requests")
    add("--ignore-retry-after", action="store_true", default=False, help="no wait after SHED")
    add("--request-timeout", type=float, default=300.0, help="seconds per request")
    add("--seed", type=int, default=0, help="seed of the request generator")
    add("--shape", choices=SHAPES, default="steady", help="steady, step, spike, ramp")
    add("--step-levels", default="", help="users per step, e.g. 1,2,4,8,16,32")
    add("--step-time", type=float, default=30.0, help="seconds per step")
    add("--spike-users", type=int, default=None, help="users during the spike")
    add("--spike-at", type=float, default=None, help="spike start, seconds")
    add("--spike-duration", type=float, default=None, help="spike length, seconds")
    add("--ramp-time", type=float, default=None, help="seconds to reach -u users")
    add("--sla-ttft-p90", type=float, default=None, help="step: largest level under this P90")


class LLMUser(FastHttpUser):
    host = "http://127.0.0.1:8080"

    def __init__(self, environment: Any) -> None:
        options = environment.parsed_options
        if options is not None and getattr(options, "request_timeout", None):
            self.network_timeout = self.connection_timeout = float(options.request_timeout)
        super().__init__(environment)
        self.profile = read_profile(options)
        # Users start one by one, so the count so far tells them apart and keeps runs repeatable.
        number = environment.runner.user_count if environment.runner is not None else 0
        self.rng = random.Random(self.profile.seed * 1_000_003 + number)
        self.model = self.profile.model

    def wait_time(self) -> float:
        return self.profile.think_time

    def headers(self, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if stream:
            headers["Accept-Encoding"] = "identity"  # compression would batch the events
        if self.profile.api_key:
            headers["Authorization"] = f"Bearer {self.profile.api_key}"
        return headers

    def on_start(self) -> None:
        if self.model:
            return
        with self.client.get(
            "/v1/models", headers=self.headers(False), name="/v1/models", catch_response=True
        ) as resp:
            try:
                self.model = str(resp.json()["data"][0]["id"])
            except Exception as exc:
                resp.failure(f"no model given and /v1/models lists none: {exc!r}")
                return
            resp.success()

    @task
    def one_request(self) -> None:
        if not self.model:
            self.on_start()  # the server may have become ready since
            if not self.model:
                time.sleep(1.0)
                return
        path, stream, body = next_request(self.profile, self.model, self.rng)
        name = f"{path} stream" if stream else path
        backoff = self.send(path, name, body, stream)
        if backoff:
            time.sleep(backoff)  # cooperative: Locust runs users on gevent's patched time

    def send(self, path: str, name: str, body: dict[str, Any], stream: bool) -> float:
        """Send one request and record it; return how long to back off (0 unless shed)."""
        started_epoch, started = time.time(), time.perf_counter()
        timings: Timings | None = None
        backoff = 0.0
        with self.client.post(
            path, json=body, headers=self.headers(stream), name=name,
            stream=stream, catch_response=True,
        ) as resp:  # fmt: skip
            status = resp.status_code
            wait = retry_after_seconds(resp.headers) if status in SHED_STATUSES else None
            if wait is not None:
                _excerpt(resp, stream)  # read the short body so the connection can be reused
                resp.request_meta["request_type"] = "SHED"
                resp.success()
                if self.profile.honor_retry_after:
                    backoff = min(wait, MAX_BACKOFF_S)
            elif not status:
                resp.failure(f"no answer: {getattr(resp, 'error', None)!r}")
            elif status != 200:
                resp.failure(f"HTTP {status}: {_excerpt(resp, stream)}")
            else:
                try:
                    timings, problem = (
                        self.read_stream(resp, started) if stream else self.read_body(resp, started)
                    )
                except Exception as exc:
                    timings, problem = None, f"reading the answer: {exc!r}"
                resp.request_meta["response_time"] = (time.perf_counter() - started) * 1000
                if problem:
                    timings = None
                    resp.failure(problem)
                else:
                    resp.success()
        if timings is not None:
            self.record(name, started_epoch, timings)
        return backoff

    def read_stream(self, resp: Any, started: float) -> tuple[Timings, str | None]:
        reader = StreamReader(started)
        size = 0
        for line in _lines(resp):
            size += len(line)
            reader.feed(line, time.perf_counter())
        timings = reader.timings(time.perf_counter())
        resp.request_meta["response_length"] = size
        if reader.error:
            return timings, f"error in stream: {reader.error}"
        if not reader.done:
            return timings, "stream ended before data: [DONE]"
        if timings.ttft is None:
            return timings, "stream carried no tokens"
        return timings, None

    def read_body(self, resp: Any, started: float) -> tuple[Timings, str | None]:
        content = resp.content or b""
        timings = completion_timings(content, started, time.perf_counter())
        return timings, None if timings.output_tokens > 0 else "answer carried no tokens"

    def record(self, name: str, started_epoch: float, t: Timings) -> None:
        fire = self.environment.events.request.fire
        common: dict[str, Any] = {"name": name, "exception": None, "context": {}, "start_time": started_epoch}
        if t.ttft is not None:
            fire(request_type="TTFT", response_time=t.ttft * 1000, response_length=0, **common)
        if t.tpot is not None:
            fire(request_type="TPOT", response_time=t.tpot * 1000, response_length=0, **common)
        fire(
            request_type="tokens_per_s",
            response_time=t.tokens_per_s,
            response_length=t.output_tokens,
            **common,
        )


class SelectedShape(LoadTestShape):
    """The shape named by ``--shape``; reads ``-u``, ``-r`` and ``-t`` as its common options."""

    use_common_options = True

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.schedule: Schedule | None = None

    def reset_time(self) -> None:
        # Called when a run starts: options may have changed in the web UI since the last one.
        super().reset_time()  # type: ignore[no-untyped-call]
        self.schedule = None

    def current(self) -> Schedule:
        if self.schedule is None:
            assert self.runner is not None and self.runner.environment.parsed_options is not None
            self.schedule = build_schedule(self.runner.environment.parsed_options)
        return self.schedule

    def tick(self) -> Target:
        return self.current().at(self.get_run_time())  # type: ignore[no-untyped-call]


def _lines(resp: Any) -> Iterator[bytes]:
    raw = getattr(resp, "_response", None)
    if raw is None or not hasattr(raw, "readline"):
        yield from (resp.content or b"").splitlines(keepends=True)
        return
    # geventhttpclient's readline hands over each SSE line as soon as it arrives; read(n) would
    # wait for n bytes and blur the first-token time.
    while line := raw.readline(b"\n"):
        yield line


def _excerpt(resp: Any, stream: bool) -> str:
    try:
        text = (resp.content or b"").decode("utf-8", "replace")
    except Exception:
        text = ""
    return " ".join(text.split())[:160] or ("(stream)" if stream else "(empty body)")


def check_options(environment: Any, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    try:
        read_profile(options)
        schedule = build_schedule(options)
    except ValueError as exc:
        log.error("bad option: %s", exc)
        if environment.runner is not None:
            environment.runner.quit()
        return
    if isinstance(schedule, Step):
        watch_steps(environment, schedule)


def watch_steps(environment: Any, schedule: Step) -> None:
    """Attribute outcomes to sweep levels during this run and report the table when it stops."""
    recorder = StepRecorder(schedule.levels, schedule.step_time)
    run_start = time.time()

    def on_request(request_type: str, response_time: float, **kw: Any) -> None:
        # fired when a request ends; start_time is when it began
        elapsed = (kw.get("start_time") or time.time()) - run_start
        if request_type == "POST":
            recorder.request(elapsed, response_time / 1000, kw.get("exception") is not None)
        elif request_type == "SHED":
            recorder.shed(elapsed)
        elif request_type == "TTFT":
            recorder.first_token(elapsed, response_time / 1000)
        elif request_type == "tokens_per_s":
            recorder.output(time.time() - run_start, int(kw.get("response_length") or 0))

    def on_stop(**_: Any) -> None:
        environment.events.request.remove_listener(on_request)
        environment.events.test_stop.remove_listener(on_stop)
        results = recorder.results()
        options = environment.parsed_options
        sla = getattr(options, "sla_ttft_p90", None)
        log.info("step sweep:\n%s", render(results, float(sla) if sla else None))
        if missing := recorder.unfinished():
            log.warning("step sweep: no request finished at %s users; lengthen --step-time", missing)
        prefix = getattr(options, "csv_prefix", None)
        if prefix:
            write_csv(Path(f"{prefix}_steps.csv"), results)

    environment.events.request.add_listener(on_request)
    environment.events.test_stop.add_listener(on_stop)


# Locust finds listeners only by registration when it imports this file.
events.init_command_line_parser.add_listener(add_arguments)  # type: ignore[no-untyped-call]
events.test_start.add_listener(check_options)  # type: ignore[no-untyped-call]
