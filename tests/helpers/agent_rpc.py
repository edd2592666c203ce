"""What the headless agents the tests drive have in common (pi in :mod:`helpers.pi_agent`,
oh-my-pi in :mod:`helpers.omp_agent`): an install from npm that may be missing, and the agent in
RPC mode (JSON lines on stdin and stdout) as a child process whose every record is kept."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["AgentUnavailable", "Record", "RpcChild", "npm_reachable"]

Record = dict[str, Any]


class AgentUnavailable(RuntimeError):
    """The agent is not installed and cannot be: ``npm_reachable`` says whether npm was why."""

    def __init__(self, message: str, npm_reachable: bool) -> None:
        super().__init__(message)
        self.npm_reachable = npm_reachable


def npm_reachable() -> bool:
    npm = shutil.which("npm")
    if npm is None:
        return False
    try:
        return subprocess.run([npm, "ping"], capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class RpcChild:
    """``args`` (an agent's ``--mode rpc``) as a child process, its stderr in ``log_path``; every
    stdout line :meth:`_parse` makes a record of is kept (``records``). ``name`` names the agent
    in its reader thread and in a failed wait."""

    name = "agent"

    def __init__(self, args: list[str], workdir: Path, env: dict[str, str],
                 log_path: Path) -> None:
        self.log_path = log_path
        self._stderr = log_path.open("wb")
        self.proc = subprocess.Popen(args, cwd=workdir, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self.records: list[Record] = []
        self._changed = threading.Condition()
        self._ids = 0
        threading.Thread(target=self._read, name=f"{self.name}-rpc", daemon=True).start()

    def _parse(self, line: bytes) -> Record | None:
        """The record of a stdout line (None: not a record)."""
        record: Record = json.loads(line)
        return record

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # binary: splits on LF only, as RPC framing requires
            record = self._parse(line)
            if record is None:
                continue
            with self._changed:
                self.records.append(record)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, match: Callable[[Record], bool], since: int = 0,
                 timeout: float = 60) -> Record:
        """The first record at index >= ``since`` that ``match``es (waits for it)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self.records[since:]:
                    if match(record):
                        return record
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"{self.name}: no matching record within {timeout:g} s "
                                         f"(exit {self.proc.poll()}); log:\n{self.log()[-2000:]}")
                self._changed.wait(left)

    def command(self, command: Record, timeout: float = 60) -> Record:
        """Send ``command``; its response (``success`` checked by the caller)."""
        self._ids += 1
        cid = f"c{self._ids}"
        mark = len(self.records)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": cid, **command}) + "\n").encode())
        self.proc.stdin.flush()
        return self.wait_for(lambda r: r.get("type") == "response" and r.get("id") == cid,
                             mark, timeout)

    def events(self, kind: str, since: int = 0) -> list[Record]:
        with self._changed:
            return [r for r in self.records[since:] if r.get("type") == kind]

    def log(self) -> str:
        self._stderr.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")
