"""The worker's writes to a session: conditional, atomic, exactly once per job (Lua scripts).

Reads go through :class:`api_client.SessionStore` (the same layout and decoding as the client);
this module adds the three commits only a worker makes. Every script takes the session's data
keys plus the job's record, all in the session's hash slot: the record holds the job's effect
marker (its ``effect`` field, written with its ``result``: exactly once). Each also keeps the
tenant's count of stored bytes (:mod:`api_client.contract.stored_bytes`), which never refuses a
commit: in the same step on a single Redis, by a command after it on a Redis Cluster.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis

from api_client.contract.errors import SessionNotFoundError
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import register
from api_client.contract.redis_conn import REDIS_DOWN, unavailable
from api_client.contract.session import JsonObject, dump_record
from api_client.contract.settings import DEFAULT_SESSION_TTL_S
from api_client.contract.stored_bytes import StoredBytes

__all__ = ["CommitOutcome", "CommitStatus", "CommitStore", "entry_line_parts"]

_CANDIDATES = 4
# A prune rewrites its lines in steps of at most this many lines / bytes of new JSON, so that no
# script keeps Redis from the other clients for long (a 20 000-entry session's first threshold
# compaction prunes thousands of lines: one script of all of them held Redis far too long).
REWRITE_STEP_LINES = 500
REWRITE_STEP_BYTES = 256 << 10
# How long the rewriting marker outlives the last step: the steps follow each other at once,
# so only a worker that died half-way leaves it to lapse.
REWRITING_TTL_MS = 10_000


class CommitStatus(StrEnum):
    COMMITTED = "committed"    # this call wrote the change
    DUPLICATE = "duplicate"    # an earlier delivery of the job already did (entry id returned)
    STALE = "stale"            # the session moved on; nothing written, re-plan
    CANCELLED = "cancelled"    # cancel requested; nothing written
    FINISHED = "finished"      # the job record is no longer running; nothing written
    NOID = "noid"              # every candidate id was taken (retry with new ones)
    BUSY = "busy"              # another job is rewriting the session's lines; nothing written


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    status: CommitStatus
    entry_id: str | None = None
    revision: int | None = None
    entry: JsonObject | None = None   # the stored entry (committed with an entry)

    @property
    def applied(self) -> bool:
        return self.status in (CommitStatus.COMMITTED, CommitStatus.DUPLICATE)


def entry_line_parts(entry: Mapping[str, Any]) -> tuple[str, str]:
    """(head, tail) of a stored line around the id and parentId the script fills in.

    ``entry`` holds ``type`` and the fields after ``parentId`` (``timestamp`` first); the stored
    line has pi's key order: type, id, parentId, timestamp, ...
    """
    rest = {k: v for k, v in entry.items() if k not in ("type", "id", "parentId")}
    body = dump_record(rest)
    head = '{"type":' + json.dumps(entry["type"], ensure_ascii=False) + ',"id":'
    tail = ("," + body[1:]) if rest else "}"
    return head, tail


def _candidates() -> str:
    return " ".join(secrets.token_hex(4) for _ in range(_CANDIDATES))


def is_cluster(client: object) -> bool:
    """A Redis Cluster client (``worker_redis`` makes one when ``redis_cluster`` is set)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


class CommitStore:
    """Worker-side commits for one Redis (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout, *, walk_limit: int = 10_000,
                 session_ttl_s: int = DEFAULT_SESSION_TTL_S, cluster: bool | None = None) -> None:
        self.redis = client
        self.layout = layout
        self.walk_limit = walk_limit  # the script's parent walk (entries); longer counts as stale
        self.session_ttl_s = session_ttl_s  # every commit refreshes the session's retention
        self._entry = register(client, "commit_entry")
        self._branch = register(client, "commit_branch")
        self._prune = register(client, "commit_prune")
        # On a Cluster the tenant's count of stored bytes is kept by a command apart (None: as
        # the client is).
        self._cluster = is_cluster(client) if cluster is None else cluster
        self._count = register(client, "stored_bytes")

    def effect(self, job_id: str) -> str | None:
        """The entry id an earlier delivery of ``job_id`` committed ('' = a change without an
        entry) by a worker of an older version, which kept the marker in the session's
        ``effects`` hash, or None. Today's marker is the record's ``effect`` field
        (``JobRecord.effect``), read with the record: this is only for a redelivery of a job
        such a worker may have committed (docs/recovery.md, rolling upgrades)."""
        jk = self.layout.job(job_id)
        value = self._call(self.redis.hget, jk.session.effects, job_id)
        return None if value is None else str(value)

    def entry(self, session_id: str, entry_id: str) -> JsonObject | None:
        line = self._call(self.redis.hget, self.layout.session(session_id).entries, entry_id)
        return None if line is None else dict(json.loads(line))

    def append_entry(self, job_id: str, snapshot_leaf: str | None, entry: Mapping[str, Any],
                     result: Mapping[str, Any]) -> CommitOutcome:
        """Append ``entry`` under the current leaf if the snapshot is still valid (see module)."""
        head, tail = entry_line_parts(entry)
        args = [job_id, snapshot_leaf or "", str(self.walk_limit), head, tail]
        return self._until_id(self._entry, job_id, args, result)

    def branch(self, job_id: str, snapshot_leaf: str | None, destination: str | None,
               entry: Mapping[str, Any] | None, result: Mapping[str, Any]) -> CommitOutcome:
        """Move the leaf to ``destination``, writing ``entry`` there first if given."""
        head, tail = entry_line_parts(entry) if entry is not None else ("", "")
        args = [job_id, snapshot_leaf or "", destination or "", head, tail]
        return self._until_id(self._branch, job_id, args, result)

    def rewrite(self, job_id: str, rewrites: Sequence[tuple[str, str]],
                result: Mapping[str, Any] | None, *, rewrites_seen: int,
                snapshot_leaf: str | None = None,
                pruned_through: str | None = None) -> CommitOutcome:
        """Replace stored lines, (entry id, new line), all or none: only while the session's
        rewrites counter is still ``rewrites_seen`` (no line changed since the plan read them)
        and, given ``snapshot_leaf``, while that leaf is on the current leaf's path. Many lines
        go in bounded steps (``commit_prune.lua``); the first decides for all of them.
        ``pruned_through``: the prune watermark to record (``SessionKeys.pruned``).

        ``result`` None: a step inside another job (no effect recorded for it)."""
        pages = _pages(rewrites)
        flag, result_json = "0" if result is None else "1", _json(result or {})
        tail = [snapshot_leaf or "", str(self.walk_limit), str(rewrites_seen),
                pruned_through or "", str(REWRITING_TTL_MS), str(self.session_ttl_s),
                self._counted(job_id).field]
        outcome = CommitOutcome(CommitStatus.COMMITTED)
        for n, page in enumerate(pages):
            step = ("all" if len(pages) == 1 else "begin" if n == 0
                    else "end" if n == len(pages) - 1 else "more")
            last = step in ("all", "end")  # the result goes with the step that records it
            args = [job_id, flag, result_json if last else "", step, *tail]
            for entry_id, line in page:
                args += [entry_id, line]
            outcome = self._reply(job_id, self._call_script(self._prune, self._prune_keys(job_id),
                                                            args))
            if outcome.status is not CommitStatus.COMMITTED:
                return outcome
        return outcome

    # -- plumbing -------------------------------------------------------------------------------
    def _until_id(self, script: Any, job_id: str, args: list[str],
                  result: Mapping[str, Any]) -> CommitOutcome:
        for _ in range(3):
            outcome = self._run(script, job_id, [*args, _candidates(), _json(result)])
            if outcome.status is not CommitStatus.NOID:
                return outcome
        return outcome

    def _keys(self, job_id: str) -> list[str]:
        jk = self.layout.job(job_id)
        s = jk.session
        return [s.header, s.entries, s.order, s.leaf, s.rev, jk.record]

    def _counted(self, job_id: str) -> StoredBytes:
        return StoredBytes.of(self.layout, self.layout.job(job_id).session_id,
                              cluster=self._cluster)

    def _prune_keys(self, job_id: str) -> list[str]:
        s = self.layout.job(job_id).session
        return [*self._keys(job_id), s.rewrites, s.rewriting, s.pruned,
                *self._counted(job_id).script_keys()]

    def _run(self, script: Any, job_id: str, args: list[str]) -> CommitOutcome:
        counted = self._counted(job_id)
        reply = self._call_script(script, [*self._keys(job_id), *counted.script_keys()],
                                  [*args, str(self.session_ttl_s), counted.field])
        return self._reply(job_id, reply)

    @staticmethod
    def _call_script(script: Any, keys: list[str], args: list[str]) -> Any:
        try:
            return script(keys=keys, args=args)
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    def _reply(self, job_id: str, reply: Any) -> CommitOutcome:
        jk = self.layout.job(job_id)
        status, entry_id, revision, line = (str(x) for x in reply[:4])
        if status == "nosession":
            raise SessionNotFoundError(f"Session {jk.session_id} not found")
        if status == "committed" and self._cluster:
            self._count_apart(job_id, int(reply[4]))
        return CommitOutcome(
            CommitStatus(status),
            entry_id if status in ("committed", "duplicate") else None,
            int(revision) if revision.lstrip("-").isdigit() else None,
            dict(json.loads(line)) if line else None,
        )

    def _count_apart(self, job_id: str, changed: int) -> None:
        """On a Cluster the tenant's count is in another slot: changed after the commit (a
        worker that dies in between leaves it short until the session is imported again,
        deleted or expires)."""
        if changed:
            counted = self._counted(job_id)
            self._call_script(self._count, [counted.key], ["add", counted.field, str(changed)])

    @staticmethod
    def _call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except REDIS_DOWN as err:
            raise unavailable(err) from err


def _pages(rewrites: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``rewrites`` in steps of at most :data:`REWRITE_STEP_LINES` lines and about
    :data:`REWRITE_STEP_BYTES` of new JSON (a step holds one line at least)."""
    pages: list[list[tuple[str, str]]] = [[]]
    size = 0
    for item in rewrites:
        if pages[-1] and (len(pages[-1]) >= REWRITE_STEP_LINES or size >= REWRITE_STEP_BYTES):
            pages.append([])
            size = 0
        pages[-1].append(item)
        size += len(item[1])
    return pages


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
