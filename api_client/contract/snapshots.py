"""Loading a session as one snapshot: the read both the client and the worker make.

One transaction reads the header, revision, leaf and the length of the append order; the order
and the stored lines follow in bounded pages (:func:`read_stored`), so that no single Redis
command of a large session keeps the server busy for long (Redis runs one command at a time:
a 30 MB ``HGETALL`` made every other client of the shard wait for it). The pages need no
transaction: a stored entry never changes its id or parent, appends only add ids after the
length read, and the only rewrite of a line (a prune) is checked by its own commit. A session
replaced or deleted meanwhile (an id listed but not stored) is read again.

:func:`build_snapshot` decodes the replies. A worker passes a :class:`ParsedEntries` cache (its
entry cache) so that entries whose stored text is unchanged are not parsed again; the client
passes none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from api_client.contract.errors import SessionFormatError, SessionNotFoundError
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Flow, Pipeline, cmd
from api_client.contract.session import (
    CURRENT_VERSION,
    Entry,
    JsonObject,
    Session,
    parse_entry,
)

__all__ = ["ParsedEntries", "Snapshot", "StoredSession", "build_snapshot", "load_snapshot",
           "read_lines", "read_stored"]

ORDER_PAGE = 10_000  # ids per LRANGE
LINE_BYTES = 512 << 10  # stored JSON per HMGET, about: each command moves half a MB
_FIRST_LINES = 64  # ids of the first HMGET, before the lines' size is known
_MAX_LINES = 4_096
_READS = 3  # a session replaced during a read is read again, this often


class ParsedEntries(Protocol):
    """Entries parsed by earlier loads, by (session, line, id, stored text)."""

    def lookup(self, session_id: str, order: Sequence[str],
               texts: Sequence[str]) -> list[Entry | None]: ...

    def remember(self, session_id: str, order: Sequence[str], texts: Sequence[str],
                 entries: Sequence[Entry]) -> None: ...


@dataclass(frozen=True)
class Snapshot:
    """A session as loaded in one round trip: entries in stored order, the stored leaf (which is
    not the last entry after a navigate) and the revision the data belongs to."""

    session: Session
    revision: int
    leaf_id: str | None
    # Characters of stored JSON parsed for this snapshot, not taken from the entry cache: what
    # is new to this process (a worker primes token counts only when it is a lot)...
    parsed_chars: int = 0
    # ... of all the characters of stored JSON it holds.
    stored_chars: int = 0


@dataclass(frozen=True)
class StoredSession:
    """A session's keys as read by :func:`read_stored` (``header`` None: no such session)."""

    header: str | None
    revision: str | None
    leaf: str | None
    order: list[str]
    lines: dict[str, str]  # id → stored line (an id of ``order`` missing here is corrupt)

    def replies(self) -> list[Any]:
        """[header, rev, leaf, order, lines]: what :func:`build_snapshot` decodes."""
        return [self.header, self.revision, self.leaf, self.order, self.lines]


def read_lines(key: str, ids: Sequence[str]) -> Flow[list[str | None]]:
    """The stored lines of ``ids`` from the entries hash ``key``, in pages of about
    :data:`LINE_BYTES` (the page size follows the lines read so far)."""
    out: list[str | None] = []
    size = _FIRST_LINES
    while len(out) < len(ids):
        page = list(ids[len(out):len(out) + size])
        got: list[str | None] = yield cmd("hmget", key, page)
        out += got
        chars = sum(len(line) for line in got if line)
        size = max(16, min(_MAX_LINES, LINE_BYTES * len(page) // max(1, chars)))
    return out


def read_stored(layout: KeyLayout, session_id: str) -> Flow[StoredSession]:
    """Header, revision, leaf, order and lines of a session, in bounded commands."""
    k = layout.session(session_id)
    for _ in range(_READS):
        header, rev, leaf, length = yield Pipeline((
            cmd("get", k.header), cmd("get", k.rev), cmd("get", k.leaf), cmd("llen", k.order)))
        if header is None:
            return StoredSession(None, rev, leaf, [], {})
        order: list[str] = []
        if length:
            pages = yield Pipeline(tuple(cmd("lrange", k.order, at, at + ORDER_PAGE - 1)
                                         for at in range(0, int(length), ORDER_PAGE)),
                                   transaction=False)
            order = [entry_id for page in pages for entry_id in page][:int(length)]
        texts = yield from read_lines(k.entries, order)
        lines = {i: t for i, t in zip(order, texts, strict=True) if t is not None}
        if len(lines) == len(order) or (yield cmd("get", k.header)) == header:
            return StoredSession(header, rev, leaf, order, lines)  # complete, or corrupt
    raise SessionFormatError("the session kept being replaced while it was read",
                             source=f"redis:{session_id}")


def load_snapshot(layout: KeyLayout, session_id: str,
                  cache: ParsedEntries | None = None) -> Flow[Snapshot]:
    """The session as one snapshot (:func:`read_stored`: bounded commands)."""
    stored = yield from read_stored(layout, session_id)
    return build_snapshot(session_id, stored.replies(), cache)


def build_snapshot(session_id: str, replies: Sequence[Any],
                   cache: ParsedEntries | None = None) -> Snapshot:
    """Decode [header, rev, leaf, order, entries-hash] (the load pipeline's replies); with a
    ``cache``, an entry whose stored text is unchanged is the object parsed before."""
    header_text, rev, leaf, order, stored = replies
    if header_text is None:
        raise SessionNotFoundError(f"Session {session_id} not found")
    source = f"redis:{session_id}"
    texts = list(map(stored.get, order))
    if None in texts:
        line = texts.index(None)
        raise SessionFormatError(f"entry {order[line]} is in the order list but not stored",
                                 source=source, line=line + 2)  # lines numbered as in an export
    known = (cache.lookup(session_id, order, texts) if cache is not None
             else [None] * len(order))
    entries: list[Entry] = []
    parsed = 0
    for line, (text, entry) in enumerate(zip(texts, known, strict=True), start=2):
        if entry is None:
            entry = parse_entry(_json_object(text, source, line), source=source, line=line)
            parsed += len(text)
        entries.append(entry)
    if cache is not None and parsed:
        cache.remember(session_id, order, texts, entries)
    size = sum(map(len, texts))
    header = _json_object(header_text, source, 1)
    session = Session(header, entries, source, CURRENT_VERSION)
    return Snapshot(session, int(rev or 0), leaf or None, parsed, size)


def _json_object(text: str, source: str, line: int) -> JsonObject:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise SessionFormatError(f"stored JSON is corrupt ({err.msg})", source=source,
                                 line=line) from err
    if not isinstance(value, dict):
        raise SessionFormatError("stored JSON is not an object", source=source, line=line)
    return value
