"""Parsed entries kept across snapshot loads, so a session that grew is parsed only where it grew.

A worker loads the same session again and again (threshold compactions, drafts, prunes): each
load used to parse every stored entry afresh, and every per-message result (token counts, the
prompt's text, the fact ledger) was lost with the old objects. With an :class:`EntryCache`,
:func:`api_client.contract.snapshots.build_snapshot` hands out the *same* ``Entry`` object for an
entry whose stored JSON has not changed (same session, id, line and text), so the worker's
identity-keyed memos (``worker.memo``) hit across jobs.

The cache keeps each entry's stored text beside the parsed entry and compares the texts: a
snapshot checks every entry, and comparing before-compaction's 2.4 MB takes 0.15 ms where a
SHA-256 of it took 1.55 ms (with the CPU's SHA instructions). The texts are kept as the
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
map (an entry keyed by (session, id) cost ~1 µs a line: 1.0-1.4 ms of a large-session job,
against ~0.15 ms now). An entry is reused where the line holds the same id and the same text;
an entry that moved to another line is parsed again, as before.

Bounded: at most ``max_entries`` entries over all sessions, the least recently loaded sessions
evicted first (a session larger than the bound keeps its first ``max_entries`` lines);
thread-safe (writes take a lock, lookups none: a session's lines are replaced, never changed).
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
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


class EntryCache:
    """The entries parsed from each session's last snapshot, reused where a line is unchanged."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self._sessions: OrderedDict[str, _Lines] = OrderedDict()
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
        last = self._sessions.get(session_id)
        if last is None:
            self.misses += len(order)
            return [None] * len(order)
        same_ids = map(operator.eq, order, last.ids)  # as long as the shorter of the two
        found: list[Entry | None] = [
            entry if same_id and known == text else None
            for same_id, text, known, entry in zip(same_ids, texts, last.texts, last.entries,
                                                   strict=False)]
        found += [None] * (len(order) - len(found))
        try:  # noqa: SIM105  (the session was loaded: the last to be evicted)
            self._sessions.move_to_end(session_id)
        except KeyError:  # evicted by another thread just now
            pass
        # Not found.count(None): that calls each entry's dataclass __eq__ (0.6 M instructions).
        hits = sum(map(operator.is_not, found, itertools.repeat(None)))
        self.hits += hits
        self.misses += len(order) - hits
        return found

    def remember(self, session_id: str, order: Sequence[str], texts: Sequence[str],
                 entries: Sequence[Entry]) -> None:
        """Keep a snapshot's lines: ``entries`` parsed from ``texts`` (or reused)."""
        if self.max_entries == 0:
            return
        keep = min(len(order), self.max_entries)
        lines = _Lines(list(order[:keep]), list(texts[:keep]), list(entries[:keep]))
        with self._lock:
            old = self._sessions.pop(session_id, None)
            self._size += keep - (len(old.ids) if old is not None else 0)
            self._sessions[session_id] = lines
            while self._size > self.max_entries:
                _, evicted = self._sessions.popitem(last=False)
                self._size -= len(evicted.ids)

    def resize(self, max_entries: int) -> None:
        with self._lock:
            self.max_entries = max(0, max_entries)
            while self._size > self.max_entries and self._sessions:
                _, evicted = self._sessions.popitem(last=False)
                self._size -= len(evicted.ids)
