"""A real worker and Redis against a hostile model over loopback HTTP (issue 33, findings 1
and 5): an overflow compaction still ends with an entry, a 100 MB answer is never stored, and
a provider echoing the API key leaves it in no job record, event or log line.

Before: JSON nested 100 000 deep failed the job as "internal error (RecursionError)" with no
fallback (an agent waiting on its overflow compaction stayed stuck); a 100 MB answer was stored
as a 104,857,600-character summary; the echoed ``Bearer sk-…`` reached the WARNING log, the
record's ``error`` and the global event stream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient, JobFailedError
from helpers.hostile_http import MB, HostileServer, chat, deep_json, echo, huge, json_answer
from worker.llm.settings import ModelCandidate
from worker.settings import WorkerSettings

KEY = "sk-live-HOSTILEkey0123456789"
SUMMARY = "## Goal\nA bounded summary."


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[HostileServer, HostileServer]]:
    """The primary model and the fallback, each a hostile server of its own."""
    pair = HostileServer(), HostileServer()
    yield pair
    for srv in pair:
        srv.close()


@pytest.fixture
def primary(servers: tuple[HostileServer, HostileServer]) -> HostileServer:
    for srv in servers:
        srv.default = json_answer(chat(SUMMARY))
    return servers[0]


@pytest.fixture
def fallback(servers: tuple[HostileServer, HostileServer], primary: HostileServer
             ) -> HostileServer:
    return servers[1]


@pytest.fixture(scope="module")
def worker_settings(module_redis: str,
                    servers: tuple[HostileServer, HostileServer]) -> WorkerSettings:
    models = [ModelCandidate(provider="openai", model=name, base_url=srv.url + "/v1",
                             api_key=KEY, context_window=200_000, timeout_s=10)
              for name, srv in zip(("primary", "fallback"), servers, strict=True)]
    return runtime_settings(module_redis, models=models, llm_backoff_base_ms=20,
                            llm_backoff_max_ms=50, llm_backoff_jitter=0.0,
                            llm_failure_threshold=100)


@pytest.fixture
def captured() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler, root = Keep(level=logging.DEBUG), logging.getLogger()
    root.addHandler(handler)
    worker_log = logging.getLogger("worker")
    level, worker_log.level = worker_log.level, logging.DEBUG
    yield records
    root.removeHandler(handler)
    worker_log.setLevel(level)


def test_an_overflow_compaction_survives_json_nested_100k_deep(
        client: CompactionClient, primary: HostileServer, fallback: HostileServer,
        demo_text: str) -> None:
    sid = new_session(client, demo_text)
    primary.default = deep_json(100_000)
    job = client.compact(sid, reason="overflow")
    entry = job.wait(30)
    assert entry["summary"].startswith(SUMMARY)
    assert job.record().model == "openai/fallback"
    assert len(primary.requests) >= 3 and fallback.requests  # retried (transient), then next


def test_a_100_mb_answer_is_never_stored(client: CompactionClient, primary: HostileServer,
                                         fallback: HostileServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    primary.default = huge(100 * MB)
    entry = client.compact(sid, reason="threshold").wait(30)
    stored = max(len(line) for line in client.sessions.export_jsonl(sid).splitlines())
    assert stored < 100_000, stored
    assert entry["summary"].startswith(SUMMARY)


def test_an_echoed_key_reaches_no_record_event_or_log(
        client: CompactionClient, primary: HostileServer, fallback: HostileServer,
        demo_text: str, captured: list[logging.LogRecord]) -> None:
    sid = new_session(client, demo_text)
    primary.default = fallback.default = echo(401)  # every candidate: the job fails
    job = client.compact(sid, reason="manual")
    with pytest.raises(JobFailedError) as failed:
        job.wait(30)
    assert any(KEY in r.headers.get("authorization", "") for r in fallback.requests)
    record = job.record()
    assert record.error and "invalid request" in record.error  # the provider's words ...
    events = [*client.events(session_id=sid, since="start", follow=False),
              *client.events(since="start", follow=False)]
    texts = [str(failed.value), record.error, "\n".join(r.getMessage() for r in captured),
             *(json.dumps(e.model_dump(mode="json")) for e in events)]
    assert any("401" in text for text in texts[2:])
    for text in texts:
        assert KEY not in text  # ... without the key they quoted
