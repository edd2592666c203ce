"""Speculative jobs that end without a draft: cancelled while the model answers, or failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient, JobCancelledError, JobFailedError
from worker.settings import WorkerSettings

DEADLINE_S = 2.0


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()], job_deadline_s=DEADLINE_S)


@pytest.fixture
def client(client: CompactionClient, model: ModelServer) -> Iterator[CompactionClient]:
    yield client
    model.release()


def test_cancelled_speculative_job_leaves_no_draft(client: CompactionClient, model: ModelServer,
                                                   demo_text: str) -> None:
    sid = new_session(client, demo_text)
    text = client.sessions.export_jsonl(sid)
    model.stall_next(1)
    handle = client.compact(sid, reason="speculative")
    assert model.in_flight.wait(10)
    assert handle.cancel().value == "running"
    model.release()
    with pytest.raises(JobCancelledError):
        handle.wait(10)
    assert client.redis.get(client.layout.session(sid).draft) is None
    assert client.sessions.export_jsonl(sid) == text


def test_failed_speculative_job_leaves_no_draft(client: CompactionClient, model: ModelServer,
                                                demo_text: str) -> None:
    sid = new_session(client, demo_text)
    text = client.sessions.export_jsonl(sid)
    model.stall_next(1)  # past the job deadline: the job fails
    handle = client.compact(sid, reason="speculative")
    with pytest.raises(JobFailedError, match="deadline"):
        handle.wait(20)
    assert client.redis.get(client.layout.session(sid).draft) is None
    assert client.sessions.export_jsonl(sid) == text
    assert client.compact(sid, reason="threshold").from_draft is False
