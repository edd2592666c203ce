"""Speculative drafts, the worker's side: build the draft JSON and store it (save_draft.lua);
read the stored one, which a compaction or speculative job extends when it no longer fits
(:mod:`worker.compaction.extension`).

The shape, the validity rule and the client's apply are in
:mod:`api_client.client.draft_apply`; the key is ``SessionKeys.draft``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import redis

from api_client.contract.keys import INFLIGHT_SPECULATIVE, KeyLayout
from api_client.contract.lua_scripts import register
from api_client.contract.redis_conn import REDIS_DOWN, unavailable
from api_client.contract.settings import DEFAULT_SESSION_TTL_S
from api_client.contract.wire import now_iso
from worker.store._commits import entry_line_parts

__all__ = ["DraftStore", "draft_json"]

T = TypeVar("T")


def draft_json(job_id: str, snapshot_leaf: str, revision: int, entry: Mapping[str, Any], *,
               from_extension: bool, tokens_after: int, snapshot_entries: int,
               snapshot_tokens: int, threshold: int, usage: Mapping[str, int],
               lead_ms: int | None = None, base_job_id: str | None = None,
               ineffective_above: int | None = None, cost_usd: float | None = None,
               agent_key: str = "") -> str:
    """The draft (fields: :mod:`api_client.client.draft_apply`). ``entry`` is the planned
    compaction entry; its id, parentId and timestamp are filled in when the draft is applied.
    ``threshold``: the line its context must fit under to be applied; ``usage``: what it cost,
    the draft it extended (``base_job_id``) included, and ``cost_usd`` its USD."""
    body = {k: v for k, v in entry.items() if k not in ("id", "parentId", "timestamp")}
    _, tail = entry_line_parts({"type": "compaction", **body})
    draft: dict[str, Any] = {
        "jobId": job_id, "snapshotLeafId": snapshot_leaf, "snapshotRevision": revision,
        "firstKeptEntryId": entry.get("firstKeptEntryId"),
        "tokensBefore": entry.get("tokensBefore"), "tokensAfter": tokens_after,
        "summary": entry.get("summary"), "details": entry.get("details"),
        "fromExtension": from_extension, "entry": body, "lineTail": tail,
        "snapshotEntries": snapshot_entries, "snapshotTokens": snapshot_tokens,
        "createdAt": now_iso(), "threshold": threshold, "usage": dict(usage),
    }
    if lead_ms is not None:
        draft["leadMs"] = lead_ms
    if base_job_id:
        draft["baseJobId"] = base_job_id
    if cost_usd is not None:  # the applied compaction's record says it (draftCostUsd)
        draft["costUsd"] = cost_usd
    if ineffective_above is not None:  # the worker's loop-guard line (apply_draft.lua)
        draft["ineffectiveAbove"] = ineffective_above
    if entry.get("shortSummary") is not None:
        draft["shortSummary"] = entry["shortSummary"]
    if agent_key:  # planned with the request's agent settings (apply_draft.lua compares)
        draft["agentKey"] = agent_key
    return json.dumps(draft, ensure_ascii=False, separators=(",", ":"))


class DraftStore:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout, ttl_s: int,
                 session_ttl_s: int = DEFAULT_SESSION_TTL_S) -> None:
        self.redis = client
        self.layout = layout
        self.ttl_s = ttl_s
        self.session_ttl_s = session_ttl_s
        self._save = register(client, "save_draft")

    def save(self, job_id: str, draft: str) -> str:
        """'saved', or why not: 'cancelled' | 'finished' | 'nosession'."""
        jk = self.layout.job(job_id)
        keys = [jk.session.header, jk.record, jk.session.draft]
        try:
            return str(self._save(keys=keys, args=[draft, str(self.ttl_s),
                                                   str(self.session_ttl_s)]))
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    def running(self, session_id: str) -> str | None:
        """The id of the session's speculative job while a worker runs it (its record
        ``running``, its lease live), else None: a queued one is not waited for."""
        job_id = self._read(lambda: self.redis.get(
            self.layout.session(session_id).inflight(INFLIGHT_SPECULATIVE)))
        if not job_id:
            return None
        jk = self.layout.job(str(job_id))

        def look() -> list[Any]:
            pipe = self.redis.pipeline(transaction=False)  # one slot: the session's
            pipe.hget(jk.record, "state")
            pipe.pttl(jk.lease)
            return list(pipe.execute())

        state, lease_ms = self._read(look)
        return str(job_id) if state == "running" and int(lease_ms) > 0 else None

    def planned_on(self, job_id: str, leaf_id: str) -> None:
        """A speculative job's snapshot leaf, on its record while it runs: a compaction that
        would join it judges whether its draft will be exact (``worker.service._draft_join``)."""
        record = self.layout.job(job_id).record
        self._read(lambda: self.redis.hset(record, "snapshotLeafId", leaf_id))

    def snapshot_of(self, job_id: str) -> str | None:
        """The snapshot leaf a running speculative job planned on (None: not said yet)."""
        record = self.layout.job(job_id).record
        raw = self._read(lambda: self.redis.hget(record, "snapshotLeafId"))
        return None if raw is None else str(raw)

    @staticmethod
    def _read(call: Callable[[], T]) -> T:
        try:
            return call()
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    def get(self, session_id: str) -> dict[str, Any] | None:
        try:
            raw = self.redis.get(self.layout.session(session_id).draft)
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        return None if raw is None else dict(json.loads(raw))
