"""The real oh-my-pi, headless: ``@oh-my-pi/pi-coding-agent`` 18.2 and Bun from npm, installed by
``make omp`` into ``integrations/oh-my-pi/node_modules``, run in RPC mode (JSON lines on stdin
and stdout, ``PI_NATIVE_VARIANT=baseline``) against a loopback model, with its remote compaction
endpoint (``compaction.remoteEndpoint``) set; a recording proxy in front of ``compactor serve``
keeps every byte oh-my-pi sent it.

Used by the end-to-end test tests/runtime/test_runtime_ohmypi.py (docs/oh-my-pi.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from helpers.agent_rpc import AgentUnavailable, Record, RpcChild, npm_reachable
from helpers.pi_model import Call, StreamingModel
from helpers.tcp_proxy import RecordingProxy

__all__ = ["OMP_SUMMARY_PROMPT", "OmpModel", "OmpRpc", "OmpUnavailable", "RecordingProxy",
           "ensure_omp", "write_omp_agent_dir"]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "integrations" / "oh-my-pi"
BIN = PACKAGE / "node_modules" / ".bin"
# oh-my-pi's summarization calls open with this system prompt (pi-agent-core's
# compaction/prompts/summarization-system.md): a local summary is told from a turn by it.
OMP_SUMMARY_PROMPT = "Summarize user–AI coding-assistant conversations"


class OmpUnavailable(AgentUnavailable):
    """oh-my-pi is not installed and cannot be: ``npm_reachable`` says whether npm was why."""


def _installed() -> bool:
    return all(p.exists() for p in (BIN / "omp", BIN / "bun",
                                    PACKAGE / "node_modules" / ".installed"))


def ensure_omp() -> Path:
    """The folder of ``omp`` and ``bun`` as ``make omp`` installs them (it runs now if needed)."""
    if not _installed():
        run = subprocess.run(["make", "-s", "omp"], cwd=REPO, capture_output=True, text=True,
                             timeout=900)
        if not _installed():
            tail = (run.stderr or run.stdout).strip().splitlines()[-5:]
            raise OmpUnavailable("make omp did not install oh-my-pi: " + " | ".join(tail),
                                 npm_reachable())
    return BIN


def write_omp_agent_dir(path: Path, *, model_url: str, provider_key: str,
                        remote_endpoint: str | None, context_window: int, threshold_tokens: int,
                        keep_recent_tokens: int, compaction_key: str | None = None,
                        retries: bool = False) -> Path:
    """oh-my-pi's config folder (``PI_CODING_AGENT_DIR``): one OpenAI-compatible model on
    loopback whose key is ``provider_key``, remote compaction at ``remote_endpoint`` (None:
    none, oh-my-pi alone), no speculative compaction and no retries (a test's failures are
    meant; ``retries``: oh-my-pi's default ``retry`` settings). With ``compaction_key``, a
    provider entry ``compactor`` of that key at the endpoint's base is the model's
    ``compactionModel`` (the key a ``/chat/completions`` endpoint is sent first). JSON is YAML:
    the files are written as JSON."""
    path.mkdir(parents=True, exist_ok=True)
    model: dict[str, Any] = {"id": "m", "contextWindow": context_window, "maxTokens": 4000}
    models: dict[str, Any] = {"providers": {"loop": {
        "baseUrl": model_url, "api": "openai-completions", "apiKey": provider_key,
        "models": [model]}}}
    if compaction_key is not None and remote_endpoint is not None:
        model["compactionModel"] = "compactor/summarizer"
        models["providers"]["compactor"] = {
            "baseUrl": remote_endpoint.removesuffix("/chat/completions"),
            "api": "openai-completions", "apiKey": compaction_key,
            "models": [{"id": "summarizer", "contextWindow": context_window,
                        "maxTokens": 4000}]}
    compaction: dict[str, Any] = {"enabled": True, "thresholdTokens": threshold_tokens,
                                  "keepRecentTokens": keep_recent_tokens, "asyncEnabled": False}
    if remote_endpoint is not None:
        compaction["remoteEndpoint"] = remote_endpoint
    config: dict[str, Any] = {"compaction": compaction}
    if not retries:
        config["retry"] = {"enabled": False}
    (path / "models.yml").write_text(json.dumps(models), encoding="utf-8")
    (path / "config.yml").write_text(json.dumps(config), encoding="utf-8")
    return path


class OmpModel(StreamingModel):
    """:class:`StreamingModel` for oh-my-pi: its local summaries are ``omp-summary`` calls, and
    every answer is text that does not repeat itself (oh-my-pi stops a reply that loops)."""

    def _record(self, body: dict[str, Any]) -> Call:
        call = super()._record(body)
        if call.source == "pi" and call.text().startswith(OMP_SUMMARY_PROMPT):
            call.source = "omp-summary"
        return call

    def _reply(self, call: Call) -> str:
        if call.source == "compactor":
            return super()._reply(call)
        n = len(self.calls)
        return " ".join(f"Step {n}.{i}: the parser reads field {i * 7 % 13} of line {i}."
                        for i in range(self.reply_chars // 45))


class OmpRpc(RpcChild):
    """``omp --mode rpc`` as a child process; every stdout record is kept (``records``)."""

    name = "omp"

    def __init__(self, bin_dir: Path, agent_dir: Path, workdir: Path) -> None:
        for folder in (workdir, agent_dir / "home"):
            folder.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "PI_"))}
        env.update({"PI_CODING_AGENT_DIR": str(agent_dir), "PI_NATIVE_VARIANT": "baseline",
                    "HOME": str(agent_dir / "home"),  # nothing of the user's ~/.omp
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
        args = [str(bin_dir / "omp"), "--mode", "rpc", "--model", "loop/m", "--no-tools",
                "--no-lsp", "--no-title", "--no-extensions", "--no-skills", "--no-rules"]
        super().__init__(args, workdir, env, agent_dir / "omp-stderr.log")

    def _parse(self, line: bytes) -> Record | None:
        """The record, with ``_at``: when it was read (``time.monotonic()``; oh-my-pi's records
        carry no time)."""
        try:
            record = super()._parse(line)
        except ValueError:
            return None  # not a record (oh-my-pi writes its records one a line)
        if record is not None:
            record["_at"] = time.monotonic()
        return record

    def prompt(self, message: str, timeout: float = 60) -> int:
        """Send a prompt and wait for the end of its agent run; the index its records start at."""
        mark = len(self.records)
        response = self.command({"type": "prompt", "message": message}, timeout)
        assert response["success"], response
        self.wait_for(lambda r: r.get("type") == "agent_end", mark, timeout)
        return mark

    def compact(self, timeout: float = 60) -> Record:
        return self.command({"type": "compact"}, timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._stderr.close()
