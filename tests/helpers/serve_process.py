"""``compactor serve`` as a child process on a free loopback port, which a test can stop (to see
what its clients do without it) and start again on the same port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["TOKEN", "ServeProcess"]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "pi-e2e-token-0123456789"  # a test's token (16 characters at least)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    def __init__(self, redis_url: str, log: Path, log_level: str = "warning",
                 **settings: str) -> None:
        self.port = _free_port()
        self.log = log
        self.log_level = log_level  # "info": uvicorn's access log too
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
        self.env.update({"COMPACTOR_REDIS_URL": redis_url,
                         "COMPACTOR_API_TOKENS": json.dumps({TOKEN: "default"}), **settings})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "serve", "--port", str(self.port),
                 "--log-level", self.log_level], cwd=REPO, env=self.env, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"compactor serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/livez", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("compactor serve did not answer /livez")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None
