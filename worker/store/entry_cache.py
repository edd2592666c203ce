"""Parsed entries kept across snapshot loads, so a session that grew is parsed only where it grew.

A worker loads the same session again and again (threshold compactions, drafts, prunes): each
load used to parse every stored entry afresh, and every per-message result (token counts, the
prompt's text, the fact ledger) was lost with the old objects. With an :class:`EntryCache`,
:func:`api_client.contract.snapshots.build_snapshot` hands out the *same* ``Entry`` object for an
entry whose stored JSON has not changed (same session, id, line and text), so the worker's
identity-keyed memos (``worker.tokens.memo``) hit across jobs.

The cache keeps each entry's stored text beside the parsed entry and compares the texts: a
snapshot checks every entry, and comparing the texts is cheaper than hashing them (even with
the CPU's SHA instructions). The texts are kept as the
``str`` objects the store returned. A ``str`` holding one character beyond Latin-1 takes 2-4
bytes a character (before-compaction's texts: 3.8 MB as ``str``, 2.4 MB as UTF-8), but
keeping those as UTF-8 meant encoding the new text on every load to compare it: 3.5 M
instructions for large-session's 52 such entries, a third of its snapshot's decoding, on every
job. The texts add about half to the cache's memory (large-session: 2.7 MB parsed + 1.0 MB of
text; before-compaction: 4.7 + 3.8 MB).

The reused objects are shared between the jobs (and threads) of a process: nothing may change
a snapshot's entries or messages in place (the service never does; it builds new dicts).

Kept per session, as the last snapshot's lines: entry ids, texts and parsed entries in three
lists. A snapshot compares its lines with them list against list, not entry by entry through a
map (an entry keyed by (session, id) cost a lookup a line, several times what the lists
cost). An entry is reused where the line holds the same id and the same text;
an entry that moved to another line is parsed again, as before.

A job that reads only the part of a session's path it needs (``worker.store.paths``) finds its
entries by id instead (:meth:`EntryCache.path_entries`): such a read starts at the leaf, and
the part read shifts as the session grows, so a line-by-line comparison would miss.

Bounded: at most ``max_entries`` entries over all sessions, the least recently loaded sessions
evicted first (a session larger than the bound keeps its first ``max_entries`` lines);
thread-safe (writes take a lock, lookups none: a session's lines are replaced, never changed).
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from api_client.contract.session import Entry

__all__ = ["DEFAULT_ENTRIES", "EntryCache"]

DEFAULT_ENTRIES = 20_000  # about 80-140 MB for sessions like the reference agent's (4-7 KB each)


@dataclass(frozen=True)
class _Lines:
    """A session's last snapshot, line by line (the lists are never changed)."""

    ids: list[str]
    texts: list[str]
    entries: list[Entry]


_PathEntries = dict[str, tuple[str, Entry]]  # id → (stored text, entry), of a path read


class EntryCache:
    """The entries parsed from each session's last snapshot, reused where a line is unchanged."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        # (session, "lines" | "path") → what the session's last load of that kind parsed.
        self._sessions: OrderedDict[tuple[str, str], _Lines | _PathEntries] = OrderedDict()
        self._lock = threading.Lock()
        self._size = 0  # entries over all sessions
        self.max_entries = max(0, max_entries)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return self._size

    def lookup(self, session_id: str, order: Sequence[str],
               texts: Sequence[str]) -> list[Entry | None]:
        """The entry parsed before from exactly each line's stored text (``order``: the entry
        ids, ``texts``: their stored texts, line by line), or None where the line is new or
        changed."""
        last = self._sessions.get((session_id, "lines"))
        if not isinstance(last, _Lines):
            self.misses += len(order)
            return [None] * len(order)
        same_ids = map(operator.eq, order, last.ids)  # as long as the shorter of the two
        found: list[Entry | None] = [
            entry if same_id and known == text else None
            for same_id, text, known, entry in zip(same_ids, texts, last.texts, last.entries,
                                                   strict=False)]
        found += [None] * (len(order) - len(found))
        self._touch((session_id, "lines"))
        # Not found.count(None): that calls each entry's dataclass __eq__ (0.6 M instructions).
        hits = sum(map(operator.is_not, found, itertools.repeat(None)))
        self.hits += hits
        self.misses += len(order) - hits
        return found

    def remember(self, session_id: str, order: Sequence[str], texts: Sequence[str],
                 entries: Sequence[Entry]) -> None:
        """Keep a snapshot's lines: ``entries`` parsed from ``texts`` (or reused)."""
        keep = min(len(order), self.max_entries)
        self._store((session_id, "lines"),
                    _Lines(list(order[:keep]), list(texts[:keep]), list(entries[:keep])))

    def path_entries(self, session_id: str) -> Mapping[str, tuple[str, Entry]]:
        """The entries the session's last path read parsed: id → (stored text, entry). An
        entry is reused only where its stored text is the same (a prune rewrites lines)."""
        last = self._sessions.get((session_id, "path"))
        if not isinstance(last, dict):
            return {}
        self._touch((session_id, "path"))
        return last

    def remember_path(self, session_id: str, texts: Sequence[str],
                      entries: Sequence[Entry]) -> None:
        """Keep what a path read parsed (``entries`` from ``texts``, or reused)."""
        keep = min(len(entries), self.max_entries)
        self._store((session_id, "path"), {e.id: (t, e) for t, e in
                                           zip(texts[:keep], entries[:keep], strict=True)})

    def _touch(self, key: tuple[str, str]) -> None:
        try:  # noqa: SIM105  (the session was loaded: the last to be evicted)
            self._sessions.move_to_end(key)
        except KeyError:  # evicted by another thread just now
            pass

    def _store(self, key: tuple[str, str], value: _Lines | _PathEntries) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            old = self._sessions.pop(key, None)
            self._size += _count(value) - (_count(old) if old is not None else 0)
            self._sessions[key] = value
            self._evict()

    def _evict(self) -> None:
        while self._size > self.max_entries and self._sessions:
            _, evicted = self._sessions.popitem(last=False)
            self._size -= _count(evicted)

    def resize(self, max_entries: int) -> None:
        with self._lock:
            self.max_entries = max(0, max_entries)
            self._evict()


def _count(value: _Lines | _PathEntries) -> int:
    return len(value.ids) if isinstance(value, _Lines) else len(value)
