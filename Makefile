# One entry point for people and CI.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test lint typecheck check demo bench clean

install:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# The example hook plugin is installed so its entry point is exercised by the tests.
	$(PY) -m pip install -q -e examples/compactor-example-plugin

test:
	$(PY) -m pytest -q

lint:
	$(VENV)/bin/ruff check worker api_client tests bench

typecheck:
	$(VENV)/bin/mypy

check: lint typecheck test

demo:
	$(VENV)/bin/compactor demo

bench:
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
