"""Token counts shared between workers (worker.store.token_counts, on the run's Redis).

A cold job of a large session stores what it tokenized; a worker new to the session loads it
and tokenizes next to nothing, and plans exactly as the first did. The store is a cache: bad
fields are skipped, a dead Redis costs the job nothing but the saving.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from service.service_fakes import JOB_ID, SESSION_ID, world

from api_client.contract.job_enums import CompactReason
from api_client.contract.keys import KeyLayout
from api_client.contract.session import Entry
from helpers.sessions import assistant, chain, user
from worker.service import run_job
from worker.store.token_counts import RedisTokenCounts
from worker.tokens import PRIME_MIN_CHARS, TiktokenTokenizer
from worker.tokens.cache import content_key

LAYOUT = KeyLayout("tc")


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    for key in client.scan_iter("tc:*"):
        client.delete(key)
    client.close()


def large_conversation() -> list[Entry]:
    """Turns of prose and file lists: well over PRIME_MIN_CHARS of text."""
    items = []
    for i in range(40):
        words = " ".join(f"word{i}x{j}" for j in range(400))
        files = "\n".join(f"./src/file{i}_{j}.py" for j in range(200))
        items += [user(f"question {i}: {words}"), assistant(f"answer {i}:\n{files}")]
    return chain(*items)


def tokenized_by(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    texts: list[str] = []
    real = TiktokenTokenizer._encoded_len

    def recording(self: TiktokenTokenizer, text: str) -> int:
        texts.append(text)
        return real(self, text)

    monkeypatch.setattr(TiktokenTokenizer, "_encoded_len", recording)
    return texts


def test_a_cold_worker_loads_what_the_first_one_tokenized(
        raw: redis.Redis[str], monkeypatch: pytest.MonkeyPatch) -> None:
    entries = large_conversation()
    counts = RedisTokenCounts(raw, LAYOUT, ttl_s=600)
    committed = []
    tokenized: list[list[str]] = []
    for _ in range(2):  # two workers (each world its own tokenizer), each new to the session
        w = world(entries=entries, reason=CompactReason.MANUAL, tokenizer="tiktoken",
                  keep_recent_tokens=2_000)
        w.sessions.parsed_chars = PRIME_MIN_CHARS  # the snapshot was parsed anew
        w.rt.token_counts = counts
        texts = tokenized_by(monkeypatch)
        assert run_job(w.rt, JOB_ID).state == "succeeded"
        tokenized.append(texts)
        (compaction,) = [e.raw for e in w.sessions.session.entries if e.type == "compaction"]
        committed.append(compaction)
    first, second = (sum(map(len, texts)) for texts in tokenized)
    key = LAYOUT.session(SESSION_ID).token_counts
    assert raw.hlen(key) > 100 and 0 < raw.ttl(key) <= 600
    assert first > PRIME_MIN_CHARS
    assert second < 0.02 * first  # what was left: the prompts' templates and short pieces
    # Exact counts: the second worker planned and committed what the first did.
    assert committed[0]["firstKeptEntryId"] == committed[1]["firstKeptEntryId"]
    assert committed[0]["tokensBefore"] == committed[1]["tokensBefore"]


def test_a_session_seen_before_is_counted_as_the_plan_goes(
        raw: redis.Redis[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker that planned the session before parses only what it grew by: that is not
    # primed (a 10 % growth cost more to prime than to count in the plan), and the store is
    # neither read nor written. The same growth parsed by a worker new to the session is.
    entries = large_conversation()
    counts = RedisTokenCounts(raw, LAYOUT, ttl_s=600)
    key = LAYOUT.session(SESSION_ID).token_counts
    handed_off: list[int] = []
    real_prime = TiktokenTokenizer.prime

    def prime(self: TiktokenTokenizer, *args: Any, **kwargs: Any) -> int:
        handed_off.append(1)
        return real_prime(self, *args, **kwargs)

    monkeypatch.setattr(TiktokenTokenizer, "prime", prime)
    for stored_chars, primed in ((10 * PRIME_MIN_CHARS, False), (PRIME_MIN_CHARS, True)):
        raw.delete(key)
        handed_off.clear()
        w = world(entries=entries, reason=CompactReason.MANUAL, tokenizer="tiktoken",
                  keep_recent_tokens=2_000)
        w.sessions.parsed_chars, w.sessions.stored_chars = PRIME_MIN_CHARS, stored_chars
        w.rt.token_counts = counts
        assert run_job(w.rt, JOB_ID).state == "succeeded"
        assert bool(handed_off) is primed and bool(raw.exists(key)) is primed


def test_the_store_skips_what_it_cannot_read_and_fails_open(raw: redis.Redis[str]) -> None:
    counts = RedisTokenCounts(raw, LAYOUT, ttl_s=60)
    good = [(content_key("alpha"), 1), (content_key("beta gamma"), 3)]
    assert counts.save(SESSION_ID, good) == 2
    key = LAYOUT.session(SESSION_ID).token_counts
    raw.hset(key, mapping={"not-hex": "4", "ab" * 16: "many", "cd" * 8: "2"})
    assert sorted(counts.load(SESSION_ID)) == sorted(good)
    assert RedisTokenCounts(raw, LAYOUT, ttl_s=0).load(SESSION_ID) == []  # sharing off
    assert RedisTokenCounts(raw, LAYOUT, ttl_s=0).save("other", good) == 0
    assert not raw.exists(LAYOUT.session("other").token_counts)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=0.2, decode_responses=True,
                         retry=Retry(NoBackoff(), 0))
    dead = RedisTokenCounts(client, LAYOUT, ttl_s=60)
    assert dead.load(SESSION_ID) == []
    assert dead.save(SESSION_ID, good) == 0
