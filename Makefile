# One entry point for people and CI.
VENV ?= .venv
PY := $(VENV)/bin/python
# The example hook plugin lives here, outside the venv: a dev worker never loads it; only the
# tests that need it put this folder on sys.path (tests/hooks/conftest.py).
TEST_PLUGINS := build/test-plugins

.PHONY: install install-test-plugins test test-unit lint typecheck check demo bench chaos recovery-bench clean

install:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[worker,dev,fast]'

install-test-plugins:
	rm -rf $(TEST_PLUGINS)
	$(PY) -m pip install -q --no-deps --target $(TEST_PLUGINS) examples/compactor-example-plugin

test: install-test-plugins
	$(PY) -m pytest -q

# The fast lane: every test that needs no Redis server, broker or worker (under a minute).
# `integration` marks the others (tests/conftest.py); `make test` and `make check` run all.
test-unit: install-test-plugins
	$(PY) -m pytest -q -m "not integration"

lint:
	$(VENV)/bin/ruff check worker api_client tests bench

typecheck:
	$(VENV)/bin/mypy

check: lint typecheck test

demo:
	$(VENV)/bin/compactor demo

bench:
	$(PY) bench/run.py

# A few minutes of workers killed, Redis restarted and a worker cut off from Redis (needs root
# for the network namespace; without it the cut is skipped and said so).
chaos:
	PYTHONPATH=tests $(PY) -m recovery.chaos --duration 180 --jobs 400

# SIGKILL recovery (Redis and RabbitMQ broker) and a Redis restart, with the default settings.
recovery-bench:
	$(PY) bench/bench_recovery.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
