"""A job's read of a session: the leaf's path, from the leaf back, only as far as its plan needs.

A compaction plans on the path after the previous compaction's kept boundary (and its prune
pass on the path back to the prune watermark, ``SessionKeys.pruned``); reading and parsing a
20 000-entry session to plan on its last few hundred entries cost a cold job most of its time.
:meth:`PathStore.load_path` reads the leaf, the revision, the rewrites counter and the
watermark in one ``MGET``, then the path in pages (``path_page.lua``: the stored lines of an
entry and its parents, bounded in lines and bytes; a path without branches in runs of the order
list, a few commands a page), newest first, each line parsed once, until
``reach`` (a pure function of :mod:`worker.compaction.reach`) says the part read is enough, or
the root is read. No page needs a transaction: a stored entry never changes its parent, and a
line a prune rewrites meanwhile makes that prune's own commit refuse a stale plan (the rewrites
counter). An entry missing on the path means the session was replaced (read again) or is
corrupt (:class:`DanglingParentError`, as a full load would say).

On a single Redis a job's first read goes with its start (``start_job.lua``, the same page:
``_path_page.lua``; docs/storage.md "A job's start"): the ``MGET``'s values and the first page
come as a :class:`FirstRead`, and ``load_path`` goes on from them, with no round trip of its
own when that page holds what the plan needs. A re-plan reads again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis

from api_client.contract.errors import (
    DanglingParentError,
    SessionCycleError,
    SessionFormatError,
    SessionNotFoundError,
)
from api_client.contract.keys import KeyLayout, SessionKeys
from api_client.contract.lua_scripts import register
from api_client.contract.redis_conn import REDIS_DOWN, unavailable
from api_client.contract.session import Entry, parse_entry
from worker.store.entry_cache import EntryCache

__all__ = ["PAGE_BYTES", "PAGE_LINES", "FirstRead", "PathSnapshot", "PathStore", "Reach"]

PAGE_LINES = 500
PAGE_BYTES = 256 << 10  # stored JSON per page, about (a page holds one line at least)
_READS = 3  # a session replaced during a read is read again, this often

# (the path read so far, oldest first; the prune watermark) → is that enough?
Reach = Callable[[Sequence[Entry], str | None], bool]


@dataclass(frozen=True, slots=True)
class FirstRead:
    """The start of a job's read, done with the job's start (``start_job.lua``): ``counted``,
    the session's stored bytes (None: not read, no bound applies); within the bound
    ``values``, the ``MGET``'s header, revision, leaf, rewrites and prune watermark, and
    ``lines``, the first page from the leaf (None: over the bound, nothing else read)."""

    counted: int | None
    values: tuple[str | None, str | None, str | None, str | None, str | None] | None = None
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class PathSnapshot:
    """The end of a session's path as one job read it (``path`` ends at the stored leaf)."""

    path: list[Entry]
    complete: bool  # the path reaches the root
    revision: int
    leaf_id: str | None
    rewrites: int  # the session's rewrites counter before the lines were read
    pruned_through: str | None  # the prune watermark before the lines were read
    parsed_chars: int = 0  # stored JSON parsed anew (not from the entry cache) ...
    stored_chars: int = 0  # ... of all that was read


@dataclass
class _Walk:
    """A path being read, newest entry first."""

    entries: list[Entry]
    texts: list[str]
    parsed: int = 0


class PathStore:
    """``load_path(session_id, reach)`` for the service's ``Sessions`` port."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout,
                 cache: EntryCache | None = None) -> None:
        self.redis = client
        self.layout = layout
        self._cache = cache
        self._page = register(client, "path_page")

    def load_path(self, session_id: str, reach: Reach,
                  first: FirstRead | None = None) -> PathSnapshot:
        """The path from the leaf back until ``reach``; ``first``: its start, read already
        (the job's start), for the first of the reads only."""
        k = self.layout.session(session_id)
        for _ in range(_READS):
            page: list[str] | None = None
            if first is not None and first.values is not None:
                (header, rev, leaf, rewrites, pruned), page = first.values, list(first.lines)
                first = None
            else:
                # one MGET (the keys share the session's hash tag): as atomic as a MULTI
                header, rev, leaf, rewrites, pruned = self._call(partial(
                    self.redis.mget, [k.header, k.rev, k.leaf, k.rewrites, k.pruned]))
            if header is None:
                raise SessionNotFoundError(f"Session {session_id} not found")
            walk = self._walk(session_id, k, leaf or None, pruned, reach, page)
            if walk is None:
                if self._call(lambda: self.redis.get(k.header)) == header:
                    walk = _Walk([], [])  # the leaf names no entry: an empty path, as a load
                else:
                    continue  # replaced meanwhile
            complete = not walk.entries or walk.entries[-1].parent_id is None
            if self._cache is not None and walk.parsed:
                self._cache.remember_path(session_id, walk.texts, walk.entries)
            return PathSnapshot(walk.entries[::-1], complete, int(rev or 0), leaf or None,
                                int(rewrites or 0), pruned or None, walk.parsed,
                                sum(map(len, walk.texts)))
        raise SessionFormatError("the session kept being replaced while it was read",
                                 source=f"redis:{session_id}")

    def _walk(self, session_id: str, k: SessionKeys, leaf: str | None, pruned: str | None,
              reach: Reach, page: list[str] | None = None) -> _Walk | None:
        """The path from ``leaf`` back until ``reach`` or the root; None: the leaf is gone.
        ``page``: the first page, read already (from ``leaf``, as the first call would)."""
        walk = _Walk([], [])
        known = self._cache.path_entries(session_id) if self._cache is not None else {}
        source = f"redis:{session_id}"
        seen: set[str] = set()
        wanted = leaf
        while wanted is not None:
            # where ``wanted`` is in order if the path read so far is order's tail (the script
            # checks it, and reads a path without branches in a few commands)
            in_order = -1 - len(walk.entries)
            if page is None:
                lines = self._call(partial(self._page, keys=[k.entries, k.order],
                                           args=[wanted, PAGE_LINES, PAGE_BYTES, in_order]))
            else:
                lines, page = page, None  # the job's start read it
            if not lines:
                if not walk.entries:
                    return None
                child = walk.entries[-1]
                raise DanglingParentError(f"entry {child.id} has parentId {wanted!r}, which "
                                          "names no entry", source=source,
                                          line=self._line(k, child.id))
            for text in lines:
                entry = self._entry(k, source, known.get(str(wanted)), str(wanted), text, walk)
                if entry.id in seen:
                    raise SessionCycleError(f"parentId cycle through entry {entry.id}",
                                            source=source, line=self._line(k, entry.id))
                if entry.id != wanted:
                    raise SessionFormatError(f"entry {wanted} is stored with id {entry.id!r}",
                                             source=source, line=self._line(k, str(wanted)))
                seen.add(entry.id)
                walk.entries.append(entry)
                walk.texts.append(text)
                wanted = entry.parent_id
            if wanted is not None and reach(walk.entries[::-1], pruned):
                break
        return walk

    def _entry(self, k: SessionKeys, source: str, known: tuple[str, Entry] | None, wanted: str,
               text: str, walk: _Walk) -> Entry:
        """The entry stored as ``text``: the one parsed before when the text is the same."""
        if known is not None and known[0] == text:
            return known[1]
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise SessionFormatError(f"stored JSON is corrupt ({err.msg})", source=source,
                                     line=self._line(k, wanted)) from err
        if not isinstance(raw, dict):
            raise SessionFormatError("stored JSON is not an object", source=source,
                                     line=self._line(k, wanted))
        walk.parsed += len(text)
        try:
            return parse_entry(raw, source=source)
        except SessionFormatError:  # said again with its line
            return parse_entry(raw, source=source, line=self._line(k, wanted) or 0)

    def _line(self, k: SessionKeys, entry_id: str) -> int | None:
        """The entry's line in an export (for an error message only: one ``LPOS``)."""
        at = self._call(partial(self.redis.lpos, k.order, entry_id))
        return None if at is None else int(at) + 2

    @staticmethod
    def _call(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
