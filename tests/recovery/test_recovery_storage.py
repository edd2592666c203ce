"""Bounded storage: effect markers live in the job records, session streams expire,
and no log line carries URL credentials, an API key or session text."""

from __future__ import annotations

import logging

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, running_worker, runtime_settings

from api_client import CompactionClient
from helpers.sessions import user
from worker.observability.log_redaction import install, redact
from worker.service._job_context import compaction_entry
from worker.store import CommitStatus, CommitStore
from worker.store.job_lifecycle import JobStore


def _running_job(client: CompactionClient, sid: str) -> str:
    job = client.jobs.enqueue(sid, "compact", reason="manual").job_id
    JobStore(client.redis, client.settings, client.layout).mark_running(job)
    return job


def _entry(first_kept: str) -> dict[str, object]:
    return compaction_entry(summary="s", short_summary=None, first_kept_entry_id=first_kept,
                            tokens_before=1, details=None, preserve_data=None,
                            from_extension=False)


def test_the_effect_marker_lives_in_the_job_record(redis_url: str, demo_text: str) -> None:
    # The marker is the record's `effect` field (it lives as long as the record, job_ttl_s):
    # nothing of the session's grows per job, nothing needs trimming.
    with CompactionClient(redis_url) as client:
        sid = new_session(client, demo_text)
        keys = client.layout.session(sid)
        commits = CommitStore(client.redis, client.layout)
        for _ in range(3):
            job = _running_job(client, sid)
            leaf = client.sessions.load(sid).leaf_id
            outcome = commits.append_entry(job, leaf, _entry(leaf or ""), {})
            assert outcome.status is CommitStatus.COMMITTED
            client.jobs.finish(job, "succeeded")
            record = client.layout.job(job).record
            assert client.redis.hget(record, "effect") == outcome.entry_id
            assert client.jobs.get(job).effect == outcome.entry_id
        assert not client.redis.exists(keys.effects, keys.effects_at)


def test_a_session_stream_expires_with_its_records(redis_url: str, model: ModelServer,
                                                   demo_text: str) -> None:
    settings = runtime_settings(redis_url, models=[model.candidate()], job_ttl_s=600)
    with CompactionClient(settings.client) as client, running_worker(settings):
        sid = new_session(client, demo_text)
        client.compact(sid).wait(30)
        ttl = client.redis.ttl(client.layout.session(sid).events)
        assert 0 < ttl <= 600
        assert client.redis.xlen(client.layout.session(sid).events) >= 2


@pytest.fixture
def captured() -> list[logging.LogRecord]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    # Levels on the loggers themselves: Celery's start-up resets the root logger's level.
    names = ("httpx", "httpcore", "worker", "api_client", "celery", "kombu")
    old = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
    yield records
    root.removeHandler(handler)
    for name, level in old.items():
        logging.getLogger(name).setLevel(level)


def test_no_log_line_carries_credentials_keys_or_session_text(
        redis_url: str, model: ModelServer, demo_text: str,
        captured: list[logging.LogRecord]) -> None:
    base = model.base_url.replace("http://", "http://alice:s3cr3t-pw@")
    candidate = model.candidate().model_copy(update={"base_url": base})
    settings = runtime_settings(redis_url, models=[candidate])
    with CompactionClient(settings.client) as client, running_worker(settings):
        sid = new_session(client, demo_text)
        client.sessions.append(sid, user("MARKER-private-session-text"))
        client.compact(sid).wait(30)
    text = "\n".join(r.getMessage() for r in captured)
    assert "HTTP Request" in text  # httpx logged the call, redacted
    for secret in ("s3cr3t-pw", "alice:", "test-key", "MARKER-private-session-text"):
        assert secret not in text, secret


@pytest.mark.parametrize(("text", "expected"), [
    ("POST http://alice:pw@h:1/v1 ok", "POST http://***@h:1/v1 ok"),
    ("redis://:secret@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("amqp://guest:guest@rabbit:5672//", "amqp://***@rabbit:5672//"),
    ("https://token@host/path", "https://***@host/path"),
    ("mail me at a@b.c, see http://host/x", "mail me at a@b.c, see http://host/x"),
    ("http://host/p?who=a@b", "http://host/p?who=a@b"),
])
def test_redact_removes_url_userinfo_only(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_every_logger_of_the_worker_is_redacted(captured: list[logging.LogRecord]) -> None:
    install()
    logging.getLogger("worker.deep.child").warning("cannot reach %s", "redis://:pw@h:1/0")
    assert captured[-1].getMessage() == "cannot reach redis://***@h:1/0"
