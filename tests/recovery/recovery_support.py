"""Helpers of the recovery tests: Redis servers that restart on the same port (AOF optional),
worker subprocesses with their log in a file, waiting helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from helpers.waits import wait_until as poll_until

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    """:func:`helpers.waits.wait_until`, polling every 0.1 s unless told (a recovery waits on
    processes and servers, not on one Redis key)."""
    return poll_until(check, timeout, what, step)


class RedisServer:
    """A redis-server on a fixed port that can be stopped and started again (AOF optional)."""

    def __init__(self, folder: Path, *, aof: bool = True, bind: str = "127.0.0.1",
                 port: int | None = None, extra: Sequence[str] = ()) -> None:
        self.folder = folder
        self.aof = aof
        self.bind = bind
        self.port = port or free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(self.port), "--bind", *self.bind.split(),
                "--save", "",
                "--dir", str(self.folder), "--appendonly", "yes" if self.aof else "no",
                "--appendfsync", "always", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self, *, hard: bool = True) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            self.proc.wait(10)
            self.proc = None

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({
        "COMPACTOR_REDIS_URL": redis_url, "COMPACTOR_HOOKS_ENTRY_POINTS": "false",
        "COMPACTOR_CONCURRENCY": "2", "PYTHONPATH": str(REPO / "tests"),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


def model_env(base_url: str) -> str:
    return json.dumps([{"provider": "openai", "model": "loop", "base_url": base_url,
                        "api_key": "k"}])


class WorkerProcess:
    """``python -m worker worker`` in a subprocess; its log goes to ``<folder>/<name>.log``."""

    def __init__(self, env: dict[str, str], name: str, folder: Path, *,
                 prefix: Sequence[str] = (), loglevel: str = "INFO",
                 options: Sequence[str] = ("--without-mingle", "--without-gossip")) -> None:
        self.name = name
        self.log_path = folder / f"{name}.log"
        self._log = self.log_path.open("ab")
        args = [*prefix, sys.executable, "-m", "worker", "worker", "--loglevel", loglevel,
                "--hostname", f"{name}@%h", *options]
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(lambda: "ready." in self.log() or not self.alive(), timeout,
                   f"worker {self.name} to start")
        assert self.alive(), f"worker {self.name} exited:\n{self.log()[-3000:]}"

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is valid and free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


class RedisClusterServers:
    """A real 3-master Redis Cluster on free ports (no replicas), started and joined here."""

    def __init__(self, folder: Path, masters: int = 3) -> None:
        self.nodes = [RedisServer(folder / f"node{i}", aof=False, port=_cluster_port(),
                                  extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                         f"nodes-{i}.conf", "--cluster-node-timeout", "5000"])
                      for i in range(masters)]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
                        "--cluster-yes"], check=True, capture_output=True, timeout=60)
        wait_until(self._ready, 30, "the cluster to be ready", 0.2)
        return self

    def _ready(self) -> bool:
        for node in self.nodes:
            out = subprocess.run(["redis-cli", "-p", str(node.port), "cluster", "info"],
                                 capture_output=True, text=True, timeout=10).stdout
            if "cluster_state:ok" not in out:
                return False
        return True

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def kill_and_recover(client: Any, env: dict[str, str], model: Any, sid: str, folder: Path,
                     done_within_s: float = 60) -> tuple[float, float]:
    """SIGKILL the worker running a job; (s until it runs again, s until it is done), each
    waited for at most ``done_within_s`` after the kill."""
    doomed = WorkerProcess(env, "doomed", folder)
    survivor: WorkerProcess | None = None
    try:
        doomed.wait_ready()
        model.stall_next(1)
        handle = client.compact(sid, reason="threshold")
        assert model.in_flight.wait(30), "the first worker never called the model"
        survivor = WorkerProcess(env, "survivor", folder)
        survivor.wait_ready()
        doomed.kill()
        killed = time.monotonic()
        wait_until(lambda: handle.record().attempts >= 2, done_within_s, "the job to run again",
                   0.05)
        rerun = time.monotonic() - killed
        assert isinstance(handle.wait(max(0.1, killed + done_within_s - time.monotonic())),
                          dict)
        done = time.monotonic() - killed
    finally:
        model.release()
        for proc in (doomed, survivor):
            if proc is not None:
                proc.stop()
    from runtime.runtime_support import completions, entries_of_type

    record = handle.record()
    assert record.state.value == "succeeded" and record.attempts == 2
    assert len(entries_of_type(client, sid, "compaction")) == 1
    assert len(completions(client, sid, handle.id)) == 1
    return rerun, done
