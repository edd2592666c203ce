"""Redis ACL and TLS as the docs document them (issue 33, finding 6). Before: a user limited
to ``~compactor:*`` stopped the worker (``NoPermissionError`` on ``unacked_mutex``) and the client
(``compactor.compact:6``): broker keys and the model cooldown keys (``compactor:llm:``, whatever
the prefix) lay outside the prefix; a ``rediss://`` URL without ``ssl_cert_reqs`` made the worker
exit (Celery's result backend) while the client kept enqueueing; the connection-loss fix was
installed for ``redis://`` only."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    free_port,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import BrokerUnavailableError, ClientSettings, CompactionClient
from api_client.contract.errors import ConfigurationError
from helpers.doc_facts import acl_rules
from worker.llm.cooldown import RedisCooldownStore
from worker.settings import WorkerSettings

PREFIX = "acme"
# The documented ACL line of the key prefix "compactor" (docs/deploying.md, read from the page),
# for the prefix "acme": every key under the prefix; the channels kombu PSUBSCRIBEs (Redis matches
# a subscribed pattern literally): remote control, and Celery's events (Flower, gossip).
ACL = acl_rules("compactor").replace("compactor:", f"{PREFIX}:")


def test_one_acl_key_pattern_runs_a_worker_and_a_client(
        tmp_path: Path, model: ModelServer, demo_text: str) -> None:
    server = RedisServer(tmp_path / "redis", aof=False).start()
    admin: redis.Redis[str] = redis.Redis.from_url(server.url, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", PREFIX, "on", ">s3cret", *ACL.split())
    url = f"redis://{PREFIX}:s3cret@127.0.0.1:{server.port}/0"
    env = worker_env(url, COMPACTOR_MODELS=model_env(model.base_url), COMPACTOR_KEY_PREFIX=PREFIX)
    # As deployed: mingle and gossip on (remote control and worker events use pub/sub).
    worker = WorkerProcess(env, "acl", tmp_path, options=())
    try:
        worker.wait_ready()
        with CompactionClient(ClientSettings(redis_url=url, key_prefix=PREFIX)) as client:
            sid = new_session(client, demo_text)
            assert client.compact(sid).wait(60)["type"] == "compaction"
            assert client.prune(sid).wait(60) is not None
            assert [e.type for e in client.events(session_id=sid, follow=False)]
        # The model circuit breaker writes under the prefix too (it was compactor:llm:).
        settings = WorkerSettings(redis_url=url, key_prefix=PREFIX)
        cooldowns = RedisCooldownStore(redis.Redis.from_url(url), threshold=1,
                                       prefix=settings.llm_cooldown_prefix)
        assert cooldowns.record_failure("openai/loop") and cooldowns.is_cooling("openai/loop")
        time.sleep(2)  # a few rounds of the restore sweep, heartbeats and the takeover sweep
        assert worker.alive(), worker.log()[-3000:]
    finally:
        code = worker.stop()
        denied = admin.execute_command("ACL", "LOG")
        keys = admin.keys("*")
        server.stop()
    assert denied == [], denied
    assert keys and all(key.startswith(f"{PREFIX}:") for key in keys), keys
    assert any(key.startswith(f"{PREFIX}:llm:") for key in keys)
    assert "Unrecoverable" not in worker.log() and code == 0, worker.log()[-3000:]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA of the test's own and a server certificate it signed for 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=Compactor test CA", "-keyout", str(folder / "ca.key"),
             "-out", str(folder / "ca.crt"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", str(folder / "server.key"), "-out", str(folder / "server.csr"))
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-days", "2", "-in", str(folder / "server.csr"),
             "-CA", str(folder / "ca.crt"), "-CAkey", str(folder / "ca.key"),
             "-CAcreateserial", "-extfile", str(folder / "san.cnf"),
             "-out", str(folder / "server.crt"))
    return folder


class TlsRedis:
    """A redis-server that speaks TLS only (AOF on: it restarts with its data)."""

    def __init__(self, folder: Path, certs: Path) -> None:
        self.folder, self.certs, self.port = folder, certs, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def url(self, query: str = "") -> str:
        return f"rediss://127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    @property
    def ca(self) -> str:
        return f"ssl_ca_certs={self.certs / 'ca.crt'}"

    def start(self) -> TlsRedis:
        c = self.certs
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(c / "server.crt"), "--tls-key-file", str(c / "server.key"),
             "--tls-ca-cert-file", str(c / "ca.crt"), "--tls-auth-clients", "no",
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--dir", str(self.folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis.Redis.from_url(self.url(self.ca), socket_timeout=1)
        wait_until(lambda: _answers(probe), 15, "the TLS redis-server")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None


def _answers(client: redis.Redis[bytes]) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture
def tls_redis(tmp_path: Path, certificates: Path) -> Iterator[TlsRedis]:
    server = TlsRedis(tmp_path / "tls-redis", certificates).start()
    yield server
    server.stop()


def test_a_rediss_url_serves_sessions_broker_and_results_and_survives_a_restart(
        tls_redis: TlsRedis, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    url = tls_redis.url(tls_redis.ca)  # the CA only: ssl_cert_reqs is "required" by default
    # Unknown CA: refused, not silently unverified.
    with CompactionClient(tls_redis.url()) as stranger, pytest.raises(BrokerUnavailableError,
                                                                      match="certificate"):
        stranger.ping()
    env = worker_env(url, COMPACTOR_MODELS=model_env(model.base_url), COMPACTOR_LEASE_TTL_S="3")
    worker = WorkerProcess(env, "tls", tmp_path)
    try:
        worker.wait_ready()  # it used to exit here: Celery's backend wanted ssl_cert_reqs
        with CompactionClient(url) as client:
            sid, other = new_session(client, demo_text), new_session(client, demo_text)
            model.stall_next(1)
            busy = client.compact(sid)
            assert model.in_flight.wait(30), worker.log()[-3000:]
            tls_redis.stop()  # connection loss with a busy slot, over TLS
            time.sleep(1)
            tls_redis.start()
            time.sleep(2)  # the consumer notices and reconnects
            assert worker.alive(), worker.log()[-3000:]
            model.release()
            assert busy.wait(60)["type"] == "compaction"
            assert client.compact(other).wait(60)["type"] == "compaction"
    finally:
        model.release()
        code = worker.stop()
    assert "Unrecoverable" not in worker.log() and code == 0, worker.log()[-3000:]


@pytest.mark.parametrize("url", ["sentinel://127.0.0.1:26379/0", "redis+sentinel://h:26379"])
def test_sentinel_for_sessions_is_refused_with_a_clear_message(url: str) -> None:
    with pytest.raises(ConfigurationError, match="Sentinel is not supported for sessions"):
        CompactionClient(url)


@pytest.mark.parametrize(("query", "problem"), [
    ("ssl_cert_reqs=maybe", "ssl_cert_reqs must be required, optional or none"),
    ("ssl_ca_certs=/no/such/ca.pem", "is not a file"),
])
def test_bad_tls_parameters_are_configuration_errors(query: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        CompactionClient(f"rediss://127.0.0.1:6380/0?{query}")
