"""The tenants' counts of stored bytes and the ``stored_bytes`` quota, on a real Redis: every
write of a session's lines keeps its tenant's count equal to the bytes Redis holds, and an append
or import over the quota stores nothing (api_client/contract/stored_bytes.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from api_client import ClientSettings, CompactionClient, QuotaExceededError
from api_client.client import imports
from api_client.client.sessions import SessionStore
from api_client.contract.keys import KeyLayout
from api_client.contract.stored_bytes import BYTES_TOTAL, StoredBytes

TS = "2024-05-01T10:00:00.000Z"


def msg(text: str, role: str = "user") -> dict[str, Any]:
    """A whole entry with a fixed timestamp: the same append stores a line of the same size."""
    return {"type": "message", "timestamp": TS,
            "message": {"role": role, "content": [{"type": "text", "text": text}],
                        "timestamp": 1}}


def jsonl(sid: str, *texts: str) -> str:
    lines = [{"type": "session", "version": 3, "id": sid, "timestamp": TS, "cwd": "/"}]
    parent = None
    for i, text in enumerate(texts):
        lines.append({**msg(text), "id": f"e{i}", "parentId": parent})
        parent = f"e{i}"
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def held(raw: redis.Redis[str], layout: KeyLayout, sid: str) -> int:
    """The bytes of the session's lines as Redis holds them, its header's included."""
    keys = layout.session(sid)
    header = len((raw.get(keys.header) or "").encode())
    return header + sum(len(line.encode()) for line in raw.hvals(keys.entries))


def counts(raw: redis.Redis[str], layout: KeyLayout, tenant: str) -> dict[str, int]:
    return {k: int(v) for k, v in raw.hgetall(layout.tenant_bytes(tenant)).items()}


def check_counts(raw: redis.Redis[str], layout: KeyLayout, tenant: str,
                 sids: list[str]) -> dict[str, int]:
    """The tenant's count of each session is what Redis holds; the total is their sum."""
    found = counts(raw, layout, tenant)
    assert {s: found.get(s) for s in sids} == {s: held(raw, layout, s) for s in sids}
    assert found.get(BYTES_TOTAL, 0) == sum(v for k, v in found.items() if k != BYTES_TOTAL)
    return found


@pytest.fixture
def tenants(redis_url: str) -> Iterator[dict[str, CompactionClient]]:
    made = {name: CompactionClient(redis_url, tenant=name) for name in ("acme", "globex")}
    made["default"] = CompactionClient(redis_url)
    yield made
    for c in made.values():
        c.close()


def test_the_count_follows_appends_imports_and_deletes(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    acme = tenants["acme"]
    layout = acme.layout
    acme.sessions.create("a1")
    assert counts(raw, layout, "acme")["a1"] == held(raw, layout, "a1") > 0  # its header
    acme.sessions.append_many("a1", [msg("häßlich ✓ " * 20), msg("ok", "assistant")])
    acme.sessions.append("a1", msg("more"))
    assert check_counts(raw, layout, "acme", ["a1"])["a1"] > 400
    acme.sessions.import_jsonl(jsonl("a2", "x" * 500, "y"), "a2")
    check_counts(raw, layout, "acme", ["a1", "a2"])
    acme.sessions.import_jsonl(jsonl("a2", "short"), "a2", replace=True)
    check_counts(raw, layout, "acme", ["a1", "a2"])
    # A large import, written in steps to staging keys, then renamed into place.
    monkeypatch.setattr(imports, "INLINE_BYTES", 100)
    monkeypatch.setattr(imports, "STEP_BYTES", 200)
    acme.sessions.import_jsonl(jsonl("a3", *(f"line {i} " * 10 for i in range(30))), "a3")
    assert check_counts(raw, layout, "acme", ["a1", "a2", "a3"])["a3"] > 30 * 80
    assert acme.sessions.delete("a2")
    found = check_counts(raw, layout, "acme", ["a1", "a3"])
    assert "a2" not in found and found[BYTES_TOTAL] == found["a1"] + found["a3"]
    # The default tenant's sessions count in its own hash; acme's are untouched by them.
    tenants["default"].sessions.import_jsonl(jsonl("d1", "z" * 300), "d1")
    check_counts(raw, tenants["default"].layout, "default", ["d1"])
    assert counts(raw, layout, "acme") == found


def test_a_replayed_append_is_counted_once(tenants: dict[str, CompactionClient],
                                           raw: redis.Redis[str]) -> None:
    acme = tenants["acme"]
    acme.sessions.create("r1")
    first = acme.sessions.append_many("r1", [msg("once")], idempotency_key="k-1")
    again = acme.sessions.append_many("r1", [msg("once")], idempotency_key="k-1")
    assert first == again
    check_counts(raw, acme.layout, "acme", ["r1"])


def _over_quota(raw: redis.Redis[str], layout: KeyLayout, room: int) -> int:
    """Set the layout's tenant's stored_bytes_max to what it holds + ``room``; returns it."""
    tenant = layout.tenant or "default"
    limit = counts(raw, layout, tenant).get(BYTES_TOTAL, 0) + room
    raw.hset(layout.tenant_quota(tenant), "stored_bytes_max", limit)
    return limit


def test_an_append_over_the_quota_stores_nothing(tenants: dict[str, CompactionClient],
                                                 raw: redis.Redis[str]) -> None:
    acme, globex = tenants["acme"], tenants["globex"]
    for c in (acme, globex):
        c.sessions.create("q1")
        c.sessions.append("q1", msg("start"))
    limit = _over_quota(raw, acme.layout, room=50)
    before = (acme.sessions.revision("q1"), acme.sessions.export_jsonl("q1"),
              counts(raw, acme.layout, "acme"))
    big = msg("x" * 200)
    with pytest.raises(QuotaExceededError) as refused:
        acme.sessions.append("q1", big)
    err = refused.value
    assert (err.tenant, err.quota, err.limit, err.resets_at) == ("acme", "stored_bytes", limit,
                                                                 None)
    after = (acme.sessions.revision("q1"), acme.sessions.export_jsonl("q1"),
             counts(raw, acme.layout, "acme"))
    assert after == before
    # Another tenant is unaffected: the same append is stored.
    globex.sessions.append("q1", big)
    check_counts(raw, globex.layout, "globex", ["q1"])
    # The value is the total the append would have made: lifted, the same append adds as much.
    raw.hdel(acme.layout.tenant_quota("acme"), "stored_bytes_max")
    acme.sessions.append("q1", big)
    assert err.value == counts(raw, acme.layout, "acme")[BYTES_TOTAL] > limit
    # Within the limit an append passes.
    _over_quota(raw, acme.layout, room=400)
    acme.sessions.append("q1", msg("y" * 100))


def test_the_setting_is_the_default_and_the_override_wins(redis_url: str,
                                                          raw: redis.Redis[str]) -> None:
    settings = ClientSettings(redis_url=redis_url, tenant="acme", stored_bytes_max=400)
    with CompactionClient(settings) as acme:
        acme.sessions.import_jsonl(jsonl("s1", "a" * 100), "s1")
        with pytest.raises(QuotaExceededError) as refused:
            acme.sessions.append("s1", msg("b" * 200))
        assert refused.value.limit == 400
        # A new session's header counts (issue 39 M1); a write that shrinks passes over the quota.
        with pytest.raises(QuotaExceededError):
            acme.sessions.create("s2")
        acme.sessions.import_jsonl(jsonl("s1", "c"), "s1", replace=True)
        raw.hset(acme.layout.tenant_quota("acme"), "stored_bytes_max", 0)  # override: no limit
        acme.sessions.create("s2")
        acme.sessions.append("s1", msg("b" * 2000))
        check_counts(raw, acme.layout, "acme", ["s1", "s2"])


def test_an_import_over_the_quota_stores_nothing(tenants: dict[str, CompactionClient],
                                                 raw: redis.Redis[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    acme = tenants["acme"]
    acme.sessions.import_jsonl(jsonl("i1", "small"), "i1")
    limit = _over_quota(raw, acme.layout, room=300)
    text = jsonl("i2", *(f"line {i} " * 10 for i in range(30)))
    with pytest.raises(QuotaExceededError) as refused:
        acme.sessions.import_jsonl(text, "i2")  # in one script call
    assert refused.value.limit == limit and not acme.sessions.exists("i2")
    # In steps, refused by the script itself (its check before the steps left out here): the
    # staged keys go with the refusal.
    monkeypatch.setattr(imports, "INLINE_BYTES", 100)
    monkeypatch.setattr(imports, "STEP_BYTES", 200)
    monkeypatch.setattr(StoredBytes, "check", lambda self, *a, **k: iter(()))
    with pytest.raises(QuotaExceededError):
        acme.sessions.import_jsonl(text, "i2")
    assert not acme.sessions.exists("i2") and raw.keys("*import:*") == []
    # Replacing a session by a larger one counts only the growth.
    with pytest.raises(QuotaExceededError):
        acme.sessions.import_jsonl(text, "i1", replace=True)
    assert "small" in acme.sessions.export_jsonl("i1")
    check_counts(raw, acme.layout, "acme", ["i1"])


def test_on_a_cluster_the_count_is_kept_by_commands_apart(redis_url: str,
                                                         raw: redis.Redis[str]) -> None:
    # A Cluster's session scripts cannot reach the tenant's hash (another slot): the flows count
    # with stored_bytes.lua after each script and check the quota by a read before it.
    settings = ClientSettings(redis_url=redis_url, tenant="acme", redis_cluster=True)
    layout = KeyLayout(settings.key_prefix, "acme")
    store = SessionStore(redis.Redis.from_url(redis_url, decode_responses=True), layout, settings)
    assert not store.counted("c1").in_script
    store.create("c1")
    store.append_many("c1", [msg("first ✓"), msg("second", "assistant")])
    store.import_jsonl(jsonl("c2", "x" * 400), "c2")
    store.import_jsonl(jsonl("c2", "y"), "c2", replace=True)
    check_counts(raw, layout, "acme", ["c1", "c2"])
    limit = _over_quota(raw, layout, room=50)
    revision = store.revision("c1")
    with pytest.raises(QuotaExceededError) as refused:
        store.append("c1", msg("z" * 200))
    assert refused.value.limit == limit and store.revision("c1") == revision
    with pytest.raises(QuotaExceededError):
        store.import_jsonl(jsonl("c3", "z" * 200), "c3")
    assert not store.exists("c3")
    assert store.delete("c2")
    assert "c2" not in check_counts(raw, layout, "acme", ["c1"])


def test_a_draft_applied_by_the_client_counts_its_entry(tenants: dict[str, CompactionClient],
                                                        raw: redis.Redis[str]) -> None:
    acme = tenants["acme"]
    acme.sessions.create("d1")
    leaf = acme.sessions.append_many("d1", [msg("a"), msg("b", "assistant")])[-1]
    _over_quota(raw, acme.layout, room=0)  # a compaction entry is never refused
    entry = '"summary":"drafted","firstKeptEntryId":"' + leaf + '","tokensBefore":900}'
    raw.set(acme.layout.session("d1").draft, json.dumps({
        "jobId": "acme~d1:00000000000000ff", "snapshotLeafId": leaf,
        "lineTail": "," + entry, "tokensAfter": 10, "threshold": 100_000}))
    assert acme.compact("d1", reason="threshold").from_draft
    check_counts(raw, acme.layout, "acme", ["d1"])
