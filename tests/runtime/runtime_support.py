"""Helpers of the runtime tests (importable by the test modules; fixtures are in conftest)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun

from api_client import CompactionClient, JobEvent
from api_client.contract.job_events import decode_event, fill_entries
from api_client.contract.redis_flows import SyncShell
from worker.celery_app import CompactorCelery, create_app
from worker.hooks import HookSettings
from worker.settings import WorkerSettings

# Model calls a job of the demo session makes at once: it ends in a split turn, so the history's
# and the turn prefix's summaries are asked together (a third call follows them). A test that
# holds N jobs' calls waits for N * CALLS_AT_ONCE held calls.
CALLS_AT_ONCE = 2


def runtime_settings(url: str, **overrides: Any) -> WorkerSettings:
    """Test settings: only the hooks a test names (never the environment's entry points)."""
    values: dict[str, Any] = {
        "redis_url": url, "pool": "threads", "concurrency": 2, "job_deadline_s": 20.0,
        "visibility_timeout_s": 60.0, "lease_ttl_s": 3.0,
        "hooks": HookSettings(entry_points=False, plugins=[]),
    }
    values.update(overrides)
    return WorkerSettings(**values)


@contextmanager
def running_worker(settings: WorkerSettings) -> Iterator[CompactorCelery]:
    app = create_app(settings)
    try:
        with start_worker(app, pool="threads", concurrency=settings.concurrency,
                          perform_ping_check=False, loglevel="WARNING", shutdown_timeout=30):
            yield app
    finally:
        app.close_runtime()


def new_session(client: CompactionClient, text: str) -> str:
    return client.sessions.import_jsonl(text, f"s-{uuid.uuid4().hex[:10]}")


def session_events(client: CompactionClient, session_id: str) -> list[JobEvent]:
    """The session's events as a reader hands them out (the entries they name read back)."""
    stream = client.layout.session(session_id).events
    events = [decode_event(i, f) for i, f in client.redis.xrange(stream)]
    return SyncShell(client.redis).run(fill_entries(client.layout, events))


def completions(client: CompactionClient, session_id: str, job_id: str) -> list[JobEvent]:
    return [e for e in session_events(client, session_id) if e.job_id == job_id and e.terminal]


def entries_of_type(client: CompactionClient, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in client.sessions.export_jsonl(session_id).splitlines()[1:]
            if json.loads(line).get("type") == kind]


class Deliveries:
    """What each delivery of an in-process worker ended with, by task id (``task_postrun``).

    Workers store no task results (job records are the results), so a test that needs what one
    delivery did reads it here: ``(celery_state, return value or exception)``.
    """

    def __init__(self) -> None:
        self._seen: dict[str, list[tuple[str, Any]]] = {}
        self._changed = threading.Condition()
        task_postrun.connect(self._record, weak=False)

    def _record(self, task_id: str | None = None, retval: Any = None, state: str | None = None,
                **_: Any) -> None:
        with self._changed:
            self._seen.setdefault(str(task_id), []).append((str(state), retval))
            self._changed.notify_all()

    def wait(self, task_id: str, timeout: float = 20.0) -> tuple[str, Any]:
        """The first delivery of ``task_id`` to end (waits for it)."""
        with self._changed:
            if not self._changed.wait_for(lambda: task_id in self._seen, timeout):
                raise AssertionError(f"no delivery of {task_id} ended within {timeout:g} s")
            return self._seen[task_id][0]

    def count(self, task_id: str, state: str) -> int:
        """How many deliveries of ``task_id`` ended in ``state`` so far."""
        with self._changed:
            return sum(1 for ended, _ in self._seen.get(task_id, []) if ended == state)

    def final(self, task_id: str, timeout: float = 20.0) -> tuple[str, Any]:
        """The first end of ``task_id`` that is not a RETRY (a delivery that met another
        delivery's lease retries after ``lease_ttl_s``, then ends as a duplicate)."""
        def ended() -> bool:
            return any(state != "RETRY" for state, _ in self._seen.get(task_id, []))

        with self._changed:
            if not self._changed.wait_for(ended, timeout):
                raise AssertionError(f"no delivery of {task_id} finished within {timeout:g} s")
            return next(end for end in self._seen[task_id] if end[0] != "RETRY")


DELIVERIES = Deliveries()
