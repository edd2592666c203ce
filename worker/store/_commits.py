"""The worker's writes to a session: conditional, atomic, exactly once per job (Lua scripts).

Reads go through :class:`api_client.SessionStore` (the same layout and decoding as the client);
this module adds the three commits only a worker makes. Every script takes the session's data
keys plus the job's effect marker and record, all in the session's hash slot.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.resources import files
from typing import Any

import redis

from api_client.contract.errors import SessionNotFoundError
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import lua
from api_client.contract.redis_conn import REDIS_DOWN, unavailable
from api_client.contract.session import JsonObject, dump_record

__all__ = ["CommitOutcome", "CommitStatus", "CommitStore", "entry_line_parts", "line_digest"]

_CANDIDATES = 4


class CommitStatus(StrEnum):
    COMMITTED = "committed"    # this call wrote the change
    DUPLICATE = "duplicate"    # an earlier delivery of the job already did (entry id returned)
    STALE = "stale"            # the session moved on; nothing written, re-plan
    CANCELLED = "cancelled"    # cancel requested; nothing written
    FINISHED = "finished"      # the job record is no longer running; nothing written
    NOID = "noid"              # every candidate id was taken (retry with new ones)


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    status: CommitStatus
    entry_id: str | None = None
    revision: int | None = None
    entry: JsonObject | None = None   # the stored entry (committed with an entry)

    @property
    def applied(self) -> bool:
        return self.status in (CommitStatus.COMMITTED, CommitStatus.DUPLICATE)


@cache
def _script(name: str) -> str:
    """A commit script with the shared helpers in front (Redis scripts cannot import)."""
    helpers = lua("_walk")  # api_client/contract/lua/_walk.lua: one copy, shared with the client
    return helpers + "\n" + (files("worker.store") / f"{name}.lua").read_text(encoding="utf-8")


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


def line_digest(line: str) -> str:
    return hashlib.sha1(line.encode("utf-8")).hexdigest()


class CommitStore:
    """Worker-side commits for one Redis (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout, *, walk_limit: int = 10_000,
                 effect_retention_s: float = 86_400) -> None:
        self.redis = client
        self.layout = layout
        self.walk_limit = walk_limit
        # Effect markers older than this are trimmed by later commits (api_client.contract.keys).
        self.effect_retention_ms = max(1, int(effect_retention_s * 1000))
        self._entry = client.register_script(_script("commit_entry"))
        self._branch = client.register_script(_script("commit_branch"))
        self._prune = client.register_script(_script("commit_prune"))

    def effect(self, job_id: str) -> str | None:
        """The entry id an earlier delivery of ``job_id`` committed ('' = a change without an
        entry), or None when the job has no effect yet."""
        jk = self.layout.job(job_id)
        value = self._call(self.redis.hget, jk.session.effects, job_id)
        return None if value is None else str(value)

    def entry(self, session_id: str, entry_id: str) -> JsonObject | None:
        line = self._call(self.redis.hget, self.layout.session(session_id).entries, entry_id)
        return None if line is None else dict(json.loads(line))

    def lines(self, session_id: str, entry_ids: Sequence[str]) -> list[str | None]:
        if not entry_ids:
            return []
        key = self.layout.session(session_id).entries
        return list(self._call(self.redis.hmget, key, list(entry_ids)))

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

    def rewrite(self, job_id: str, rewrites: Sequence[tuple[str, str, str]],
                result: Mapping[str, Any] | None, *,
                snapshot_leaf: str | None = None) -> CommitOutcome:
        """Replace stored lines: (entry id, SHA-1 of the line planned on, new line), all or none,
        and (given ``snapshot_leaf``) only while that leaf is on the current leaf's path.

        ``result`` None: a step inside another job (no effect recorded for it)."""
        args = [job_id, "0" if result is None else "1", _json(result or {}), str(len(rewrites)),
                snapshot_leaf or "", str(self.walk_limit)]
        for entry_id, digest, line in rewrites:
            args += [entry_id, digest, line]
        return self._run(self._prune, job_id, args)

    # -- plumbing -------------------------------------------------------------------------------
    def _until_id(self, script: Any, job_id: str, args: list[str],
                  result: Mapping[str, Any]) -> CommitOutcome:
        for _ in range(3):
            outcome = self._run(script, job_id, [*args, _candidates(), _json(result)])
            if outcome.status is not CommitStatus.NOID:
                return outcome
        return outcome

    def _run(self, script: Any, job_id: str, args: list[str]) -> CommitOutcome:
        jk = self.layout.job(job_id)
        s = jk.session
        keys = [s.header, s.entries, s.order, s.leaf, s.rev, s.effects, jk.record, s.effects_at]
        try:
            reply = script(keys=keys, args=[*args, str(self.effect_retention_ms)])
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        status, entry_id, revision, line = (str(x) for x in reply)
        if status == "nosession":
            raise SessionNotFoundError(f"Session {jk.session_id} not found")
        return CommitOutcome(
            CommitStatus(status),
            entry_id if status in ("committed", "duplicate") else None,
            int(revision) if revision.lstrip("-").isdigit() else None,
            dict(json.loads(line)) if line else None,
        )

    @staticmethod
    def _call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except REDIS_DOWN as err:
            raise unavailable(err) from err


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
