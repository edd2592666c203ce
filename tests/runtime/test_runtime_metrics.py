"""Metrics over HTTP from real worker processes (threads and prefork pools) after real jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port
from prometheus_client.parser import text_string_to_metric_families
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import CompactionClient, JobState
from helpers.ci import missing

REPO = Path(__file__).resolve().parents[2]
QUEUES = ("compactor.urgent", "compactor.compact", "compactor.branch", "compactor.prune")
PRICES = {"price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0}


@contextmanager
def metrics_worker(redis_url: str, tmp_path: Path, **env: str) -> Iterator[int]:
    """A ``compactor worker`` process serving metrics; yields its port once /livez answers."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("COMPACTOR_", "PROMETHEUS"))}
    environ.update({"COMPACTOR_REDIS_URL": redis_url, "COMPACTOR_HOOKS_ENTRY_POINTS": "false",
                    "COMPACTOR_CONCURRENCY": "1", "COMPACTOR_METRICS_PORT": str(port),
                    "PYTHONPATH": str(REPO / "tests"), **env})
    log = (tmp_path / f"worker-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker", "worker", "--loglevel", "WARNING", "--hostname",
         f"metrics-{port}@%h", "--without-mingle", "--without-gossip"],
        cwd=REPO, env=environ, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: probe(port, "/livez")[0] == 200, 60, lambda: _log(tmp_path, port))
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _log(tmp_path: Path, port: int) -> str:
    return (tmp_path / f"worker-{port}.log").read_text(errors="replace")[-3000:]


def wait_for(check: Callable[[], bool], seconds: float, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {why()}")
        time.sleep(0.1)


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = probe(port, "/metrics")
    assert status == 200, text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def candidates(model: ModelServer) -> str:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: connection refused
    return json.dumps([
        {"provider": "openai", "model": "dead", "base_url": dead, "api_key": "k", **PRICES},
        {"provider": "openai", "model": "loop", "base_url": model.base_url, "api_key": "k",
         **PRICES},
    ])


def test_threads_worker_metrics_follow_real_jobs(own_redis: Any, model: ModelServer,
                                                 demo_text: str, tmp_path: Path) -> None:
    env = {"COMPACTOR_MODELS": candidates(model), "COMPACTOR_LLM_ATTEMPTS_PER_CANDIDATE": "1",
           "COMPACTOR_LLM_BACKOFF_BASE_MS": "0", "COMPACTOR_LLM_FAILURE_THRESHOLD": "1000"}
    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path, **env) as port:
        before = scrape(port)
        assert value(before, "compactor_broker_up") == 1
        assert {q: value(before, "compactor_queue_depth", queue=q) for q in QUEUES} == (
            dict.fromkeys(QUEUES, 0))
        assert total(before, "compactor_jobs_total") == 0

        done = client.compact(new_session(client, demo_text), reason="manual")
        assert isinstance(done.wait(60), dict)
        client.prune(new_session(client, demo_text)).wait(60)

        # One job holds the only slot on a stalled model call; two more wait in the broker,
        # in the priority list ``compactor.compact:6`` (a plain LLEN of the queue reads 0).
        model.stall_next(1)
        held = client.compact(new_session(client, demo_text), reason="threshold")
        assert model.in_flight.wait(30)
        waiting = [client.compact(new_session(client, demo_text), reason="manual")
                   for _ in range(2)]
        wait_for(lambda: value(scrape(port), "compactor_queue_depth",
                               queue="compactor.compact") == 2, 20)
        assert probe(port, "/readyz")[0] == 200
        held.cancel()
        model.release()
        _ended(held)
        for handle in waiting:
            handle.wait(60)

        wait_for(lambda: total(scrape(port), "compactor_jobs_total") == 5, 20)
        after = scrape(port)
        record = done.record()

    assert value(after, "compactor_jobs_total", kind="compact", reason="manual",
                 outcome="succeeded") == 3
    assert value(after, "compactor_jobs_total", kind="prune", reason="none",
                 outcome="succeeded") == 1
    assert value(after, "compactor_jobs_total", kind="compact", reason="threshold",
                 outcome="cancelled") == 1
    assert value(after, "compactor_job_duration_seconds_count", kind="compact",
                 outcome="succeeded") == 3
    assert value(after, "compactor_job_queue_wait_seconds_count", kind="compact",
                 reason="manual") == 3
    assert value(after, "compactor_job_queue_wait_seconds_count", kind="prune", reason="none") == 1
    assert value(after, "compactor_queue_depth", queue="compactor.compact") == 0
    # Causes, not triggers: the cancelled job is counted by its cause; what the compactions
    # removed from the context is counted too (the prune job says its own saving).
    assert value(after, "compactor_job_failures_total", kind="compact", cause="cancelled") == 1
    assert total(after, "compactor_job_failures_total") == 1
    assert value(after, "compactor_tokens_saved_total", kind="compact") > 0
    assert value(after, "compactor_tokens_saved_total", kind="prune") >= 0
    # The dead candidate fails once per model call, the loopback one then answers it.
    failed = value(after, "compactor_model_calls_total", candidate="openai/dead",
                   outcome="ConnectionFailed")
    answered = value(after, "compactor_model_calls_total", candidate="openai/loop", outcome="ok")
    assert failed >= 3 and answered >= 3
    # Every request the server got was counted; the stalled one may have been given up.
    assert answered in (model.requests, model.requests - 1)
    tokens = {d: value(after, "compactor_model_tokens_total", candidate="openai/loop", direction=d)
              for d in ("input", "output", "cache_read", "cache_write")}
    assert tokens["output"] == 9 * answered and tokens["input"] > 0  # the server's usage
    assert tokens["cache_read"] == tokens["cache_write"] == 0
    cost = value(after, "compactor_model_cost_usd_total", candidate="openai/loop")
    assert cost == pytest.approx((tokens["input"] * 3 + tokens["output"] * 15) / 1e6)
    assert value(after, "compactor_model_tokens_total", candidate="openai/dead",
                 direction="input") == 0
    # The job record carries the cost of its own calls.
    assert record.usage is not None and record.result is not None
    assert record.result["costUsd"] == pytest.approx(
        (record.usage.input * 3 + record.usage.output * 15) / 1e6)
    assert record.result["costUsd"] > 0


def test_a_model_in_cooldown_shows_on_the_gauge(own_redis: Any, model: ModelServer,
                                                demo_text: str, tmp_path: Path) -> None:
    # The dead candidate fails once per job: one failure cools it down for every worker.
    env = {"COMPACTOR_MODELS": candidates(model), "COMPACTOR_LLM_ATTEMPTS_PER_CANDIDATE": "1",
           "COMPACTOR_LLM_BACKOFF_BASE_MS": "0", "COMPACTOR_LLM_FAILURE_THRESHOLD": "1",
           "COMPACTOR_LLM_COOLDOWN_S": "120"}
    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path, **env) as port:
        before = scrape(port)
        assert value(before, "compactor_model_cooldown_seconds", candidate="openai/dead") == 0
        client.compact(new_session(client, demo_text), reason="manual").wait(60)
        after = scrape(port)
    assert 100 < value(after, "compactor_model_cooldown_seconds", candidate="openai/dead") <= 120
    assert value(after, "compactor_model_cooldown_seconds", candidate="openai/loop") == 0


def _ended(handle: Any) -> None:
    wait_for(lambda: handle.record().state is JobState.CANCELLED, 30, lambda: str(handle.record()))


def test_readiness_follows_redis_and_liveness_does_not(own_redis: Any, tmp_path: Path) -> None:
    with metrics_worker(own_redis.url, tmp_path) as port:
        wait_for(lambda: probe(port, "/readyz")[0] == 200, 30, lambda: probe(port, "/readyz")[1])
        own_redis.stop()
        wait_for(lambda: probe(port, "/readyz")[0] == 503, 30, lambda: probe(port, "/readyz")[1])
        why = probe(port, "/readyz")[1]
        assert why.startswith(("redis unavailable", "broker unavailable", "not consuming")), why
        assert probe(port, "/livez")[0] == 200  # a restart would not bring Redis back
        assert value(scrape(port), "compactor_broker_up") == 0
        assert probe(port, "/nothing")[0] == 404


def test_prefork_worker_serves_its_childrens_counts(own_redis: Any, demo_text: str,
                                                    tmp_path: Path) -> None:
    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path, COMPACTOR_POOL="prefork",
                           COMPACTOR_CONCURRENCY="2") as port:
        handles = [client.prune(new_session(client, demo_text)) for _ in range(3)]
        handles.append(client.compact(new_session(client, demo_text), reason="manual"))
        for handle in handles:
            handle.wait(60)
        wait_for(lambda: total(scrape(port), "compactor_jobs_total") == 4, 20)
        samples = scrape(port)
        assert probe(port, "/readyz")[0] == 200
    assert value(samples, "compactor_jobs_total", kind="prune", reason="none",
                 outcome="succeeded") == 3
    assert value(samples, "compactor_jobs_total", kind="compact", reason="manual",
                 outcome="succeeded") == 1
    assert value(samples, "compactor_job_queue_wait_seconds_count", kind="prune",
                 reason="none") == 3
    assert value(samples, "compactor_broker_up") == 1


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of sockets listening on ``port`` (from /proc/net/tcp, tcp6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_default_address_is_loopback(own_redis: Any, tmp_path: Path) -> None:
    if not Path("/proc/net/tcp").exists():
        missing("needs Linux /proc/net/tcp")
    with metrics_worker(own_redis.url, tmp_path) as port:
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, little-endian hex


def _rabbitmq_vhost() -> Iterator[str]:
    import shutil
    import uuid

    if shutil.which("rabbitmqctl") is None:
        missing("no RabbitMQ on this machine (rabbitmqctl missing)")
    vhost = f"compactor-depth-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["rabbitmqctl", "add_vhost", vhost], capture_output=True, timeout=60)
    if made.returncode != 0:
        missing(f"RabbitMQ is not running: {made.stderr.decode(errors='replace')[:200]}")
    subprocess.run(["rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True, timeout=60)
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)


rabbitmq_url = pytest.fixture(_rabbitmq_vhost)


def test_queue_depth_on_a_rabbitmq_broker(rabbitmq_url: str) -> None:
    from kombu import Connection, Exchange, Queue

    from worker.observability.queue_depth import QueueDepthCollector

    with Connection(rabbitmq_url) as conn:
        queue = Queue("compactor.compact", Exchange("compactor.compact"), "compactor.compact")
        producer = conn.Producer()
        for n in range(3):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key="compactor.compact",
                             declare=[queue], serializer="json")
    depth = QueueDepthCollector(rabbitmq_url, QUEUES)
    assert depth.read() == {**dict.fromkeys(QUEUES, 0), "compactor.compact": 3}
    families = {f.name: f for f in depth.collect()}
    assert [s.value for s in families["compactor_broker_up"].samples] == [1]
    down = QueueDepthCollector("amqp://guest:guest@127.0.0.1:1//", QUEUES, timeout_s=0.5)
    assert [s.value
            for s in {f.name: f for f in down.collect()}["compactor_broker_up"].samples] == [0]
