# memjobs — `make demo` and `make test` each build their own virtual environment.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-parallel test-fast coverage lint format typecheck bench bench-scale soak clean promtool typescript chromium

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "memjobs needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The model's engine built for this host (embedding/engine.py); without a C
	# compiler the wheel's engine is used (about twice the CPU a text).
	$(BIN)/python -m memjobs_worker.embedding.engine || true
	touch $@

demo: $(BIN)/.installed
	$(BIN)/memjobs demo

test: $(BIN)/.installed promtool typescript chromium
	$(BIN)/python -m pytest

# The suite in two processes (about 10 minutes instead of 20): each starts its own
# Redis and PostgreSQL, and --dist loadfile keeps a file's tests in one process. Not
# yet the default: with two processes' workers on two cores, a few timing-bound fault
# tests still miss their deadline now and then (docs/development.md).
test-parallel: $(BIN)/.installed promtool typescript chromium
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The tests that need no server (twins, pure functions, static checks): no Redis,
# no PostgreSQL, no worker process; one that tries to start a server fails.
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest --server-free -q

# Line coverage of memjobs_client and memjobs_worker, their Python subprocesses
# included (pyproject's [tool.coverage]): the server-free tests, then one
# server-backed file or two per area. It prints a figure (docs/development.md,
# "Coverage"); it is no gate, and `make test` does not trace: tracing would push
# the suite past its 20 minutes. The detector's CPU-cost bounds are left out:
# under the tracer they measure the tracer.
COVERAGE_SERVER_TESTS ?= tests/memory/test_pipeline.py tests/memory/test_store_contract.py \
	tests/memory/test_engine_contract.py tests/http/test_http_api.py tests/sessions/test_sessions.py \
	tests/knowledge/test_knowledge_store.py tests/lifecycle/test_erase_basic.py \
	tests/ops/test_dead_letters.py tests/ops/test_cli.py
coverage: $(BIN)/.installed
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest --server-free -q \
	  --deselect tests/security/test_detector_cost.py::test_text_of_secrets_costs_a_bounded_time_a_megabyte
	$(BIN)/coverage run -m pytest -q $(COVERAGE_SERVER_TESTS)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report --sort=cover

# The TypeScript client's type check needs `tsc` (its one dev dependency); best
# effort: without npm or the registry, that one test is skipped, saying why.
typescript:
	@[ -x clients/typescript/node_modules/.bin/tsc ] || ! command -v npm >/dev/null || \
	  (cd clients/typescript && npm install --no-audit --no-fund --silent) || \
	  echo "npm install failed in clients/typescript: the tsc check will be skipped"

# promtool validates deploy/prometheus; Debian's prometheus package carries it.
promtool:
	@command -v promtool >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "promtool not found: installing Debian's prometheus package (apt-get, as root)" && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null); } || \
	  echo "promtool not found (apt-get install prometheus): the deploy/ checks will be skipped"

# The console's browser tests drive Debian's chromium headless (Playwright, never
# `playwright install`); without it they are skipped, saying why.
chromium:
	@[ -x /usr/bin/chromium ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "chromium not found: installing Debian's chromium package (apt-get, as root)" && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null); } || \
	  echo "chromium not found (apt-get install chromium): the console's browser tests will be skipped"

lint: $(BIN)/.installed
	$(BIN)/ruff check producers workers tests bench
	$(BIN)/ruff format --check producers workers tests bench

format: $(BIN)/.installed
	$(BIN)/ruff format producers workers tests bench

typecheck: $(BIN)/.installed
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_knowledge.py
	$(BIN)/python bench/bench_sensitive.py
	$(BIN)/python bench/bench_hosts.py
	$(BIN)/python bench/bench_http.py
	$(BIN)/python bench/bench_load.py
	$(BIN)/python bench/bench_redis_sizing.py

# Production sizes (docs/benchmarks.md): 100,000 queued remembers of 10,000 owners
# (forget, status, readiness, console), then a 6-minute model outage under load,
# with the default retries and with MEMJOBS_MAX_RETRIES=1. About an hour here.
bench-scale: $(BIN)/.installed
	$(BIN)/python bench/bench_scale.py --backlog --timeout 3000
	$(BIN)/python bench/bench_scale.py --outage --outage-seconds 360 --final-timeout 600 --timeout 1200
	$(BIN)/python bench/bench_scale.py --outage --outage-seconds 360 --max-retries 1 --final-timeout 600 --timeout 1200

# Memory over 30 minutes of steady load with workers restarted (bench/soak_memory.py);
# then many hosts in network namespaces, bigger and repeated (root only).
soak: $(BIN)/.installed
	$(BIN)/python bench/soak_memory.py --minutes 30 --out /tmp/soak-memory.jsonl --plot-to docs/img/soak-memory.svg
	$(BIN)/python bench/soak_many_hosts.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.* clients/typescript/node_modules
