"""Parsed entries kept across snapshot loads, so a session that grew is parsed only where it grew.

A worker loads the same session again and again (threshold compactions, drafts, prunes): each
load used to parse every stored entry afresh, and every per-message result (token counts, the
prompt's text, the fact ledger) was lost with the old objects. With an :class:`EntryCache`,
:func:`api_client.session_store.build_snapshot` hands out the *same* ``Entry`` object for an
entry whose stored JSON has not changed (same session, id, line and text), so the worker's
identity-keyed memos (``worker.memo``) hit across jobs.

The cache keeps each entry's stored text beside the parsed entry and compares the texts: a
snapshot checks every entry, and comparing before-compaction's 2.4 MB takes 0.15 ms where a
SHA-256 of it took 1.55 ms (with the CPU's SHA instructions). An ASCII text (most entries:
971 of large-session's 1 018) is kept as the ``str`` itself, compared without encoding the new
one (a warm load of large-session: 0.50 -> 0.42 ms); any other as UTF-8, not as the ``str``: a
``str`` holding one character beyond Latin-1 takes 2 bytes a character (before-compaction's
took 3.8 MB). The text adds about half to the cache's memory (large-session: 2.7 MB parsed +
1.0 MB of text; before-compaction: 4.7 + 2.4 MB).

The reused objects are shared between the jobs (and threads) of a process: nothing may change
a snapshot's entries or messages in place (the service never does; it builds new dicts).

Bounded: at most ``max_entries`` entries, least recently used evicted first; thread-safe
(writes take a lock, hits none: see ``worker.memo``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from api_client.session import Entry

__all__ = ["DEFAULT_ENTRIES", "EntryCache"]

DEFAULT_ENTRIES = 20_000  # about 80-140 MB for sessions like the reference agent's (4-7 KB each)


def _kept(text: str) -> str | bytes:
    """The form an entry's text is kept and compared in: an ASCII ``str`` as it is (one byte a
    character already: a snapshot compares it without encoding it first), any other as UTF-8
    (a lone surrogate is text too). An ASCII text never equals a non-ASCII one, so a ``str``
    kept never equals the bytes of a text and the other way round."""
    return text if text.isascii() else text.encode("utf-8", "surrogatepass")


class EntryCache:
    """An LRU map from (session id, entry id) to the entry parsed from a given stored text."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self._entries: OrderedDict[tuple[str, str], tuple[str | bytes, Entry]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max(0, max_entries)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, session_id: str, order: Sequence[str],
               stored: Mapping[str, str]) -> list[Entry | None]:
        """The entry parsed before from exactly each of a snapshot's stored texts at its line
        (``order``, lines from 2 as in an export; ``stored``: the texts by id), or None where
        it is not cached or changed. One call for the whole snapshot: a call per entry took a
        third of a warm load (1 000 entries)."""
        known_entries = self._entries
        find, to_end = known_entries.get, known_entries.move_to_end
        found: list[Entry | None] = []
        hits = 0
        for line, entry_id in enumerate(order, start=2):
            key = (session_id, entry_id)
            known, text = find(key), stored.get(entry_id)
            if (known is None or text is None or known[1].line != line
                    or known[0] != _kept(text)):
                found.append(None)
                continue
            try:  # noqa: SIM105  (contextlib.suppress costs ~0.3 µs a hit)
                to_end(key)
            except KeyError:  # evicted by another thread just now
                pass
            hits += 1
            found.append(known[1])
        self.hits += hits
        self.misses += len(order) - hits
        return found

    def put(self, session_id: str, text: str, entry: Entry) -> None:
        """Keep ``entry``, parsed from the stored ``text``."""
        if self.max_entries == 0:
            return
        with self._lock:
            self._entries[(session_id, entry.id)] = (_kept(text), entry)
            self._entries.move_to_end((session_id, entry.id))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def resize(self, max_entries: int) -> None:
        with self._lock:
            self.max_entries = max(0, max_entries)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
