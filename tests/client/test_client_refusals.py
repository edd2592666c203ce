"""What Redis refuses is a typed error that says so, never "unavailable" (a caller retrying on
BrokerUnavailableError would retry forever) and never a raw redis-py exception."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import free_port, redis_server_binary

from api_client import BrokerUnavailableError, CompactionClient, ConfigurationError
from api_client.contract.errors import RedisAuthenticationError, StorageReadOnlyError

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("path", "shown"), [("/abc", "'abc'"), ("/0?db=x", "'x'")])
def test_a_database_that_is_not_a_number_is_refused_at_construction(path: str,
                                                                    shown: str) -> None:
    with pytest.raises(ConfigurationError, match=f"the database must be a number.*{shown}"):
        CompactionClient(f"redis://127.0.0.1:6379{path}")


def test_a_database_the_server_does_not_have(redis_url: str) -> None:
    with CompactionClient(redis_url.rsplit("/", 1)[0] + "/99") as client, \
            pytest.raises(ConfigurationError, match="no such database"):
        client.sessions.create()


def test_a_wrong_password_is_an_authentication_error(own_redis: Any) -> None:
    admin = redis.Redis.from_url(own_redis.url)
    admin.acl_setuser("app", enabled=True, passwords=["+right-password"], keys=["*"],
                      channels=["*"], commands=["+@all"])
    host = own_redis.url.split("//", 1)[1].split("/", 1)[0]
    with CompactionClient(f"redis://app:wrong-password@{host}/0") as client:
        with pytest.raises(RedisAuthenticationError) as refused:
            client.sessions.create()
        assert not isinstance(refused.value, BrokerUnavailableError)
        assert "wrong-password" not in str(refused.value)
    with CompactionClient(f"redis://app:right-password@{host}/0") as client:
        assert client.sessions.create()


def test_a_read_only_replica_refuses_writes_and_nothing_changes(own_redis: Any,
                                                                tmp_path: Path) -> None:
    port = free_port()
    replica = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path),
         "--replicaof", "127.0.0.1", own_redis.url.rsplit(":", 1)[1].split("/")[0]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with CompactionClient(own_redis.url) as primary:
            sid = primary.sessions.create(cwd="/r")
        url = f"redis://127.0.0.1:{port}/0"
        raw = redis.Redis.from_url(url, decode_responses=True)
        _wait(lambda: raw.info("replication").get("master_link_status") == "up")
        _wait(lambda: raw.exists(f"compactor:session:{{{sid}}}:header") == 1)
        before = raw.dbsize()
        with CompactionClient(url) as client, pytest.raises(StorageReadOnlyError,
                                                             match="read-only replica"):
            client.sessions.append(sid, {"role": "user", "content": "x", "timestamp": 1})
        assert raw.dbsize() == before
    finally:
        replica.terminate()
        replica.wait(10)


def test_a_port_that_is_not_redis(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        threading.Thread(target=answer, daemon=True).start()
        with CompactionClient(f"redis://127.0.0.1:{port}/0") as client, \
                pytest.raises(ConfigurationError, match="does not name a Redis server"):
            client.sessions.create()


def _wait(check: Any, seconds: float = 15.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not _quietly(check):
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def _quietly(check: Any) -> bool:
    try:
        return bool(check())
    except redis.ConnectionError:  # the replica is still starting
        return False
