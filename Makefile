# One-command entry points. `make setup` once, then `make demo` (the quickstart), `make test` (what CI
# runs) or `make conformance`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint typecheck pytest slow-check conformance conformance-pg lift

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"

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
# replicas sharing Redis (tests/proxy/test_replicas.py).
slow-check:
	$(BIN)/pytest -q -m slow

test: lint typecheck pytest slow-check

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
