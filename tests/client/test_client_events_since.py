"""events(since=...): from the start, from now, or after a cursor; follow or stop."""

from __future__ import annotations

import threading

import pytest
from client.conftest import seed_sessions

from api_client import CompactionClient
from api_client.contract.errors import InvalidRequestError
from helpers.jobs import worker_jobs


def finished_prune(client: CompactionClient) -> str:
    job = client.prune("s1").id
    worker_jobs(client).finish(job, "succeeded", result={"prunedEntryIds": [], "tokensSaved": 0})
    return job


def test_since_start_now_and_cursor(client: CompactionClient) -> None:
    seed_sessions(client.settings.redis_url, "s1")
    first, second = finished_prune(client), finished_prune(client)
    history = list(client.events(session_id="s1", since="start", follow=False))
    assert [e.job_id for e in history] == [first, second]
    assert list(client.events(session_id="s1", follow=False)) == history  # default: start
    assert list(client.events(session_id="s1", since="now", follow=False)) == []
    after = list(client.events(session_id="s1", since=history[0].stream_id, follow=False))
    assert [e.job_id for e in after] == [second]
    everything = list(client.events(since="start", follow=False))  # every session
    assert [e.job_id for e in everything] == [first, second]


def test_follow_from_now_sees_only_new_events(client: CompactionClient) -> None:
    seed_sessions(client.settings.redis_url, "s1")
    finished_prune(client)
    reader = client.events(session_id="s1", block_ms=200)  # follow=True: since="now"
    later = threading.Timer(0.3, lambda: finished_prune(client))
    later.start()
    event = next(iter(reader))
    later.join()
    reader.close()
    assert event.job_id != "" and event.state is not None
    assert event.job_id == list(client.events(session_id="s1", follow=False))[-1].job_id


@pytest.mark.parametrize(("since", "start"), [("yesterday", None), ("1-x", None),
                                               ("start", "0-0")])
def test_bad_since(client: CompactionClient, since: str, start: str | None) -> None:
    with pytest.raises(InvalidRequestError):
        client.events(session_id="s1", since=since, start=start)
