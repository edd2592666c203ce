"""A worker with a model chain it cannot use, or a busy metrics port, stops at start with one
line and exit status 2 (it used to start "ready" and fail every job with the provider's 401, or
end in a 40-line traceback). Real ``compactor worker`` processes; they stop before Redis."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from worker.settings import WorkerSettings, check_startup, model_chain_text


def run_worker(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    # A Redis no one listens on: the checks must answer before any connection is tried.
    base |= {"COMPACTOR_REDIS_URL": "redis://127.0.0.1:1/0", **env}
    return subprocess.run([sys.executable, "-m", "worker", "worker"], env=base,
                          capture_output=True, text=True, timeout=60)


def test_a_key_variable_that_is_not_set_stops_the_worker_in_one_line() -> None:
    models = [{"provider": "openai", "model": "gpt-x", "base_url": "https://api.openai.com/v1",
               "api_key_env": "COMPACTOR_TEST_UNSET_KEY"}]
    done = run_worker(COMPACTOR_MODELS=json.dumps(models))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "model 1 (openai/gpt-x)" in done.stderr and "$COMPACTOR_TEST_UNSET_KEY" in done.stderr


def test_a_busy_metrics_port_stops_the_worker_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_worker(COMPACTOR_METRICS_PORT=str(port))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and f"metrics port {port}" in done.stderr


@pytest.mark.parametrize(("models", "environ", "chain"), [
    ([], {}, "the deterministic summarizer (no COMPACTOR_MODELS)"),
    ([{"provider": "openai", "model": "a", "api_key_env": "K"},
      {"provider": "extractive"}], {"K": "sk-secret"}, "openai/a -> extractive"),
])
def test_the_chain_is_named_never_its_keys(models: list[dict[str, str]],
                                           environ: dict[str, str], chain: str) -> None:
    settings = WorkerSettings(models=models, metrics_port=0)
    check_startup(settings, environ)
    assert model_chain_text(settings) == chain and "sk-secret" not in chain


@pytest.mark.parametrize("models", [None, "[]"], ids=["unset", "empty"])
def test_a_deployment_that_requires_models_refuses_to_start_without_them(
        models: str | None) -> None:
    """The Kubernetes base sets COMPACTOR_REQUIRE_MODELS=true: no chain means no worker, not the
    no-LLM summarizer in silence (it used to ship COMPACTOR_MODELS=[])."""
    env = {"COMPACTOR_REQUIRE_MODELS": "true"} | ({} if models is None else
                                                  {"COMPACTOR_MODELS": models})
    done = run_worker(**env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "COMPACTOR_REQUIRE_MODELS" in done.stderr and '"provider": "extractive"' in done.stderr


def test_the_deterministic_summarizer_chosen_explicitly_passes_the_model_requirement() -> None:
    explicit = WorkerSettings(models=[{"provider": "extractive"}], require_models=True,
                              metrics_port=0)
    check_startup(explicit, {})
    assert model_chain_text(explicit) == "extractive"
    check_startup(WorkerSettings(models=[], metrics_port=0), {})  # local runs need no model
