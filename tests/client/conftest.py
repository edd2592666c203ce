"""Fixtures for the client tests: a CompactionClient on the run's private Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from api_client import ClientSettings, CompactionClient


@pytest.fixture
def settings(redis_url: str) -> ClientSettings:
    return ClientSettings(redis_url=redis_url, send_sent_event=False)


@pytest.fixture
def client(settings: ClientSettings) -> Iterator[CompactionClient]:
    with CompactionClient(settings) as c:
        yield c


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis[str]]:
    """A plain connection for looking at keys behind the client's back."""
    r: redis.Redis[str] = redis.Redis.from_url(redis_url, decode_responses=True)
    yield r
    r.close()



def seed_sessions(url: str, *session_ids: str) -> None:
    """Sessions the enqueue tests name (enqueue checks they exist), each with entries t1, t2."""
    with CompactionClient(url) as c:
        for sid in session_ids:
            c.sessions.create(sid)
            c.sessions.append_many(sid, [
                {"type": "message", "id": "t1", "message": {"role": "user", "content": "a"}},
                {"type": "message", "id": "t2", "message": {"role": "user", "content": "b"}},
            ])
