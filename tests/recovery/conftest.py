"""Fixtures of the recovery tests: a loopback model server, the demo session, Redis with AOF."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery.recovery_support import RedisServer
from runtime.runtime_model_server import ModelServer

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
