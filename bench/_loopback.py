"""The parts a runtime benchmark stands up on this machine: a model server on loopback that
answers after a fixed latency, and real ``compactor worker`` processes.

Redis comes from :func:`worker.cli.demo.embedded_redis` (a private redis-server, like the tests'),
so the benchmarks run on a fresh machine with nothing else started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from celery import Celery

from api_client.contract.routing import redis_transport_options

REPO = Path(__file__).resolve().parents[1]
SAMPLE = (REPO / "worker" / "data" / "demo-session.jsonl").read_text(encoding="utf-8")

__all__ = ["REPO", "SAMPLE", "LoopbackModel", "loopback_model", "turns_session",
           "wait_for_workers", "workers"]


class LoopbackModel:
    """An OpenAI-compatible chat endpoint answering every call after ``delay_s``. It counts the
    calls and their input tokens (the request's message texts, characters / 4: what a provider
    would bill, to within its tokenizer) and reports them as the call's ``prompt_tokens``, so
    the job records' usage is what the calls cost."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.input_tokens = 0
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real provider's endpoint

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
                with model._lock:
                    model.calls += 1
                    model.input_tokens += prompt // 4
                time.sleep(model.delay_s)
                body = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "## Goal\nBenchmark summary."}}],
                    "usage": {"prompt_tokens": prompt // 4, "completion_tokens": 10}}).encode()
                # Head and body in one write: written apart, the body waits for the
                # client's delayed ACK (Nagle), a stall a production endpoint does not have.
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode()
                self.wfile.write(head + body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def loopback_model(delay_s: float) -> Iterator[LoopbackModel]:
    model = LoopbackModel(delay_s)
    try:
        yield model
    finally:
        model.close()


def worker_env(url: str, model_url: str, pool: str, concurrency: int, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({
        "COMPACTOR_REDIS_URL": url, "COMPACTOR_POOL": pool,
        "COMPACTOR_CONCURRENCY": str(concurrency), "COMPACTOR_HOOKS_ENTRY_POINTS": "false",
        "COMPACTOR_WORKER_NAME": name,
        "COMPACTOR_MODELS": json.dumps([{"provider": "openai", "model": "bench",
                                         "base_url": model_url, "api_key": "bench",
                                         "context_window": 200000}]),
    })
    return env


@contextmanager
def workers(url: str, model_url: str, count: int = 1, *, pool: str = "threads",
            concurrency: int = 8) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes consuming from ``url``; stopped (warm shutdown) on exit."""
    with ExitStack() as stack:
        procs = []
        for i in range(count):
            env = worker_env(url, model_url, pool, concurrency, f"bench-{i}@{os.getpid()}")
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "worker", "--loglevel", "ERROR",
                 "--without-mingle", "--without-gossip", "-n", f"bench-{i}@%h"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stack.callback(_stop, proc)
            procs.append(proc)
        yield procs


def wait_for_workers(url: str, count: int, timeout_s: float = 60) -> None:
    app = Celery(broker=url, set_as_current=False)
    # the workers' list naming and key prefix (the bench's workers keep the default one)
    app.conf.broker_transport_options = redis_transport_options("compactor")
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if len(app.control.ping(timeout=0.5) or []) >= count:
                return
        raise RuntimeError(f"{count} worker(s) did not answer a ping in {timeout_s:g} s")
    finally:
        app.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_TEXT = ("the importer reads each statement line and the parser splits amounts by locale while "
         "tests cover totals currency dates and the fix keeps the public api unchanged")
WORDS = tuple(_TEXT.split())


def prose(seed: int, chars: int) -> str:
    """Deterministic text of words (long runs of one character are a tokenizer's worst case)."""
    out: list[str] = []
    size, i = 0, seed
    while size < chars:
        word = WORDS[(i * 7 + i // len(WORDS)) % len(WORDS)]
        out.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(out)


def turns_session(turns: int = 40, chars_per_message: int = 2000) -> str:
    """A JSONL session of plain user/assistant turns (no tools). A manual compaction of it cuts
    at a user message: one summary call (no split-turn prefix) and the short-summary call."""
    ts = "2026-01-01T00:00:00.000Z"
    lines = [json.dumps({"type": "session", "version": 3, "id": "bench", "timestamp": ts,
                         "cwd": "/"})]
    parent = None
    for i in range(2 * turns):
        if i % 2 == 0:
            message: dict[str, Any] = {"role": "user",
                                       "content": f"question {i} " + prose(i, chars_per_message),
                                       "timestamp": 1}
        else:
            message = {"role": "assistant", "provider": "p", "model": "m", "stopReason": "stop",
                       "timestamp": 1,
                       "content": [{"type": "text",
                                    "text": f"answer {i} " + prose(i + 1, chars_per_message)}]}
        entry_id = f"{i:08x}"
        lines.append(json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                 "timestamp": ts, "message": message}))
        parent = entry_id
    return "\n".join(lines) + "\n"
