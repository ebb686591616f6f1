# One-command entry points. `make setup` once, then `make demo` (the quickstart), `make test` (what CI
# runs) or `make conformance`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint typecheck services pytest slow-check conformance conformance-pg lift

# A virtual environment in .venv with the package and its dev tools, then what the tests need besides
# Python (PostgreSQL, Redis, Chromium): running, started, or named as missing (.ci/services).
setup:
	@echo "setup 1/4: virtual environment in $(VENV)"
	$(PY) -m venv $(VENV)
	@echo "setup 2/4: upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "setup 3/4: installing shadowguard and its dev tools (pinned by constraints.txt; a few minutes)"
	$(BIN)/pip install --progress-bar on -c constraints.txt -e ".[dev]"
	@echo "setup 4/4: services the tests use"
	@.ci/services
	@echo "setup done: activate with '. $(VENV)/bin/activate', then 'make test'"

# The quickstart: the proxy with proxy/demo/shadowguard.yaml in the background, the scripted agent
# against it once /readyz answers, then the proxy stopped (proxy/demo/__main__.py). DEMO_ARGS=--port 0
# picks a free port; --mode legacy uses the handshake protocol era.
demo:
	$(BIN)/python -m proxy.demo $(DEMO_ARGS)

lint:
	$(BIN)/ruff check guard proxy benchmark tests policies
	$(BIN)/ruff format --check guard proxy benchmark tests policies

typecheck:
	$(BIN)/mypy

pytest:
	$(BIN)/pytest -q -m "not slow"

# The tests marked slow (minutes, so not in `make pytest`): the Dockerfile's install steps in a clean
# virtualenv then the proxy started as the image starts it (tests/deploy/test_image.py), and campaigns
# on a local Ray head equal to the in-process engine's (tests/benchmark/test_ray_engine.py), two proxy
# replicas sharing Redis (tests/proxy/test_replicas.py), instructions counted under callgrind
# (tests/benchmark/test_perf_instructions.py).
slow-check:
	$(BIN)/pytest -q -m slow

# Services are started when installed but stopped; a missing one has its tests skipped with the
# reason printed (SHADOWGUARD_TEST_STRICT=1, as in CI, fails them instead).
services:
	@.ci/services

test: lint typecheck services pytest

conformance:
	$(BIN)/shadowguard bench conformance

conformance-pg:
	$(BIN)/shadowguard bench conformance --db postgresql://postgres@127.0.0.1:5432/test

# The full oracle lift campaign (507 tasks x 20 repeats x off,guard = 20,280 attempts; ~7.5 min on 2 cores)
# and its tables and figures. Not part of `make test`.
lift:
	mkdir -p results
	rm -rf results/oracle-20.jsonl results/oracle-20_run_metadata.yaml results/oracle-20-report
	$(BIN)/shadowguard bench run --agent oracle --arms off,guard --repeat 20 --workers 2 --out results/oracle-20.jsonl
	$(BIN)/shadowguard bench agg results/oracle-20.jsonl -f md > results/oracle-20.md
	$(BIN)/shadowguard bench report results/oracle-20.jsonl --out results/oracle-20-report
