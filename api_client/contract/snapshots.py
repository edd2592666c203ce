"""Loading a session as one snapshot: the read both the client and the worker make.

One pipeline reads the header, revision, leaf, append order and entries; :func:`build_snapshot`
decodes the replies. A worker passes a :class:`ParsedEntries` cache (its entry cache) so that
entries whose stored text is unchanged are not parsed again; the client passes none.
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

__all__ = ["ParsedEntries", "Snapshot", "build_snapshot", "load_snapshot"]


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


def load_snapshot(layout: KeyLayout, session_id: str,
                  cache: ParsedEntries | None = None) -> Flow[Snapshot]:
    """The session in one round trip (a pipeline of five reads)."""
    k = layout.session(session_id)
    replies = yield Pipeline((cmd("get", k.header), cmd("get", k.rev), cmd("get", k.leaf),
                              cmd("lrange", k.order, 0, -1), cmd("hgetall", k.entries)))
    return build_snapshot(session_id, replies, cache)


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
