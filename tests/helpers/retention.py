"""Reading a session's key TTLs behind Compactor's back (the retention tests, client and worker)."""

from __future__ import annotations

import re
from pathlib import Path

import redis

from api_client.contract.keys import KeyLayout, SessionKeys

REPO = Path(__file__).resolve().parents[2]
RETENTION_LUA = REPO / "api_client" / "contract" / "lua" / "_retention.lua"
# The keys that live as long as the session: a write sets their TTL to the whole retention.
SESSION_LONG = ("header", "entries", "order", "leaf", "rev", "rewrites", "pruned")
# The keys of a session share one expiry instant, moved when it has run down by 1 % of the
# retention (_retention.lua's REFRESH_SHARE): after a write each is at least that close to it.
REFRESH_SHARE = 0.01


def lua_suffixes(table: str) -> list[str]:
    """The suffixes of one of _retention.lua's tables (RETAIN_WITH_SESSION, RETAIN_CAPPED)."""
    text = RETENTION_LUA.read_text(encoding="utf-8")
    body = re.search(rf"local {table} = {{(.*?)}}", text, re.S)
    assert body is not None, table
    return re.findall(r"'([^']+)'", body.group(1))


def key_suffixes(keys: SessionKeys) -> list[str]:
    """The suffix (after ``{<sid>}:``) of every key of ``SessionKeys.all()``."""
    base = keys.header.removesuffix("header")
    return [k.removeprefix(base) for k in keys.all()]


def session_ttls(raw: redis.Redis[str], layout: KeyLayout, sid: str) -> dict[str, int]:
    """PTTL (ms) of every stored key of the session, job records aside, by suffix."""
    base = layout.session(sid).header.removesuffix("header")
    pattern = re.sub(r"([*?\[\]\\{}])", r"\\\1", base) + "*"
    found = {key.removeprefix(base): int(raw.pttl(key))
             for key in raw.scan_iter(pattern, count=1000)}
    return {name: ttl for name, ttl in found.items() if not name.startswith("job:")}


def assert_retained(raw: redis.Redis[str], layout: KeyLayout, sid: str,
                    ttl_s: int) -> dict[str, int]:
    """Every stored key of the session expires within ``ttl_s`` (none without a TTL), and those
    that live as long as the session were just refreshed to it."""
    ttls = session_ttls(raw, layout, sid)
    assert "header" in ttls, f"session {sid} is not stored: {sorted(ttls)}"
    outside = {name: ttl for name, ttl in ttls.items() if not 0 < ttl <= ttl_s * 1000}
    assert outside == {}, f"keys not expiring within {ttl_s} s (ms; -1 = never)"
    floor = ttl_s * 1000 * (1 - REFRESH_SHARE) - 2_000  # 2 s: the test's own time
    stale = {name: ttl for name, ttl in ttls.items() if name in SESSION_LONG and ttl < floor}
    assert stale == {}, "keys of the session the write did not refresh (ms)"
    instants = {ttl // 1_000 for name, ttl in ttls.items() if name in SESSION_LONG}
    assert max(instants) - min(instants) <= 2, f"not one expiry instant: {ttls}"
    return ttls
