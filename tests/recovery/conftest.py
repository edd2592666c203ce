"""Fixtures of the recovery tests: a loopback model server, the demo session, Redis with AOF."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery.recovery_support import RedisClusterServers, RedisServer
from runtime.runtime_model_server import ModelServer

from helpers.ci import missing

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "worker" / "data" / "demo-session.jsonl"


@pytest.fixture(scope="session")
def demo_text() -> str:
    return DEMO.read_text(encoding="utf-8")


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis with AOF (fsync always) of the test's own, restartable on the same port."""
    server = RedisServer(tmp_path / "redis", aof=True).start()
    yield server
    server.stop()


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """A RabbitMQ vhost of the test's own on the machine's broker (127.0.0.1:5672, guest)."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        if os.environ.get("CI"):
            pytest.fail("rabbitmqctl not found (RabbitMQ is required in CI)")
        pytest.skip("RabbitMQ (rabbitmqctl) not installed")
    vhost = f"compactor-test-{uuid.uuid4().hex[:10]}"
    subprocess.run([ctl, "-q", "add_vhost", vhost], check=True, capture_output=True, timeout=60)
    subprocess.run([ctl, "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True, timeout=60)
    yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    subprocess.run([ctl, "-q", "delete_vhost", vhost], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
        missing("redis-server / redis-cli not installed (the Redis Cluster tests)")
    cluster = RedisClusterServers(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()
