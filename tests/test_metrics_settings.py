"""Metrics settings, prices and the broker list names (pure; the HTTP side is in tests/runtime)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from worker.llm import ModelCandidate
from worker.observability.metrics import DEFAULT_ADDRESS, METRIC_NAMES
from worker.observability.queue_depth import redis_list_names
from worker.settings import WorkerSettings
from worker.summary_requests import Usage


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> WorkerSettings:
    monkeypatch.chdir("/")  # no .env of the working directory
    for name in ("COMPACTOR_METRICS_PORT", "COMPACTOR_METRICS_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return WorkerSettings()


@pytest.mark.parametrize(("env", "enabled", "port"), [
    ({}, False, None),
    ({"COMPACTOR_METRICS_PORT": ""}, False, None),  # compose passes unset variables as ""
    ({"COMPACTOR_METRICS_PORT": "0"}, False, 0),
    ({"COMPACTOR_METRICS_PORT": "9808"}, True, 9808),
    ({"COMPACTOR_METRICS_PORT": "65535"}, True, 65535),
])
def test_metrics_port(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], enabled: bool,
                      port: int | None) -> None:
    settings = _settings(monkeypatch, **env)
    assert (settings.metrics_enabled, settings.metrics_port) == (enabled, port)


@pytest.mark.parametrize("bad", ["65536", "-1", "http", "9808.5"])
def test_a_bad_metrics_port_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    with pytest.raises(ValidationError, match="metrics_port"):
        _settings(monkeypatch, COMPACTOR_METRICS_PORT=bad)


@pytest.mark.parametrize(("env", "address"), [
    ({}, "127.0.0.1"),
    ({"COMPACTOR_METRICS_ADDRESS": "0.0.0.0"}, "0.0.0.0"),
    ({"COMPACTOR_METRICS_ADDRESS": "::"}, "::"),
    ({"COMPACTOR_METRICS_ADDRESS": "10.1.2.3"}, "10.1.2.3"),
])
def test_metrics_address(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                         address: str) -> None:
    assert str(_settings(monkeypatch, **env).metrics_address) == address


def test_the_default_address_is_loopback_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert str(_settings(monkeypatch).metrics_address) == DEFAULT_ADDRESS == "127.0.0.1"


@pytest.mark.parametrize("bad", ["localhost", "0.0.0.0:9808", "256.1.1.1", "all"])
def test_a_metrics_address_must_be_an_ip(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    with pytest.raises(ValidationError, match="metrics_address"):
        _settings(monkeypatch, COMPACTOR_METRICS_ADDRESS=bad)


@pytest.mark.parametrize(("prices", "usage", "usd"), [
    ({}, Usage(1_000_000, 1_000_000), 0.0),
    ({"price_input_per_mtok": 3, "price_output_per_mtok": 15}, Usage(1_000_000, 0), 3.0),
    ({"price_input_per_mtok": 3, "price_output_per_mtok": 15}, Usage(2_000, 500), 0.0135),
    # cache tokens cost the input price unless their own is set
    ({"price_input_per_mtok": 3}, Usage(0, 0, cache_read=1_000_000, cache_write=1_000_000), 6.0),
    ({"price_input_per_mtok": 3, "price_cache_read_per_mtok": 0.3,
      "price_cache_write_per_mtok": 3.75}, Usage(0, 0, 1_000_000, 1_000_000), 4.05),
    ({"price_output_per_mtok": 0.6}, Usage(100, 10), 0.000006),
])
def test_candidate_cost(prices: dict[str, Any], usage: Usage, usd: float) -> None:
    candidate = ModelCandidate(provider="openai", model="m", **prices)
    assert candidate.cost_usd(usage) == pytest.approx(usd)


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValidationError, match="price_input_per_mtok"):
        ModelCandidate(provider="openai", model="m", price_input_per_mtok=-1)


def test_prices_come_from_compactor_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_MODELS", '[{"provider": "anthropic", "model": "claude",'
                       ' "price_input_per_mtok": 3, "price_output_per_mtok": 15}]')
    [candidate] = _settings(monkeypatch).models
    assert (candidate.price_input_per_mtok, candidate.price_output_per_mtok) == (3, 15)


@pytest.mark.parametrize(("queue", "options", "lists"), [
    ("compactor.compact", None,
     ["compactor.compact", "compactor.compact:3", "compactor.compact:6", "compactor.compact:9"]),
    ("celery", {"sep": "\x06\x16", "priority_steps": [0, 3, 6, 9]},
     ["celery", "celery\x06\x163", "celery\x06\x166", "celery\x06\x169"]),
    ("q", {"sep": ":", "priority_steps": [0]}, ["q"]),
    ("q", {}, ["q", "q\x06\x163", "q\x06\x166", "q\x06\x169"]),  # kombu's defaults
])
def test_redis_list_names(queue: str, options: dict[str, Any] | None, lists: list[str]) -> None:
    assert (redis_list_names(queue) if options is None
            else redis_list_names(queue, options)) == lists


def test_metric_names_are_prefixed_and_unique() -> None:
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES)
    assert all(name.startswith("compactor_") for name in METRIC_NAMES)
