"""The arguments of the session scripts, built and checked before anything is sent: entries
validated and bounded (``max_entry_bytes``, ``max_append_bytes``, ``max_append_entries``), an
import parsed and refused whole when a line is unusable. No I/O: :mod:`api_client.client.sessions`
sends them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence

from api_client.contract.errors import (
    AppendTooLargeError,
    EntryTooLargeError,
    SessionFormatError,
)
from api_client.contract.keys import check_session_id
from api_client.contract.session import (
    CURRENT_VERSION,
    IdFactory,
    JsonObject,
    Session,
    dump_record,
    load_session,
    parse_entry,
)
from api_client.contract.session.validate import check_entry, check_json_value
from api_client.contract.settings import ClientSettings
from api_client.contract.stored_bytes import utf8_len
from api_client.contract.wire import now_iso

__all__ = ["DEFAULT_LIMITS", "append_args", "appended_bytes", "as_entry", "import_args",
           "new_session_header", "parse_import"]

CANDIDATES = 4  # fresh ids offered per append; the script takes the first unused one
DEFAULT_LIMITS = ClientSettings.model_construct()  # the defaults, without reading the env


def new_session_header(session_id: str, cwd: str, title: str | None) -> JsonObject:
    header: JsonObject = {
        "type": "session", "version": CURRENT_VERSION, "id": session_id,
        "timestamp": now_iso(), "cwd": cwd,
    }
    if title is not None:
        header["title"] = title
    check_json_value(header, source=f"create {session_id}")
    return header


def as_entry(item: object, source: str) -> JsonObject:
    """A full entry dict, or a bare message wrapped in a ``message`` entry (validated)."""
    if not isinstance(item, Mapping):
        raise SessionFormatError(f"an entry must be a JSON object, got {type(item).__name__}",
                                 source=source)
    if "type" not in item:  # a bare message (one without a role is refused as such)
        raw: JsonObject = {"type": "message", "message": dict(item)}
    else:
        raw = dict(item)
    if raw.get("type") == "session":
        raise SessionFormatError("cannot append a session header", source=source)
    check_entry(raw, source=source)  # before parse_entry: its messages are more precise
    parse_entry(raw, source=source)
    return raw


# The stored line's id and parentId (JSON strings of at most 128 characters each), which the
# script adds: counted so that the bound holds for what Redis stores.
_ID_ROOM = 2 * (128 + 2) + len(',"parentId":')


def append_args(items: Sequence[object], source: str,
                settings: ClientSettings | None = None) -> list[str]:
    """ARGV for append.lua: the entry JSON split around the id and parentId the script fills in.
    Raises a :class:`LimitExceededError` for a batch over the settings' bounds."""
    limits = settings or DEFAULT_LIMITS
    if len(items) > limits.max_append_entries:
        raise AppendTooLargeError(source, setting="max_append_entries",
                                  limit=limits.max_append_entries, value=len(items))
    args = [str(len(items))]
    total = 0
    for index, item in enumerate(items):
        raw = as_entry(item, source)
        given = raw.pop("id", None)
        raw.pop("parentId", None)
        rest: JsonObject = {"timestamp": raw.pop("timestamp", None) or now_iso()}
        kind = raw.pop("type")
        rest.update(raw)
        body = dump_record(rest)
        head = '{"type":' + json.dumps(kind, ensure_ascii=False) + ',"id":'
        size = utf8_len(head) + utf8_len(body) + _ID_ROOM
        if size > limits.max_entry_bytes:
            raise EntryTooLargeError(f"{source}: entry {index}", setting="max_entry_bytes",
                                     limit=limits.max_entry_bytes, value=size)
        total += size
        if total > limits.max_append_bytes:
            raise AppendTooLargeError(f"{source} (entries 0-{index})", value=total,
                                      setting="max_append_bytes",
                                      limit=limits.max_append_bytes)
        args += [head, "," + body[1:]]
        ids = [secrets.token_hex(4) for _ in range(CANDIDATES)]
        args.append("=" + given if given else " ".join(ids))
    return args


# What the script adds to a line on top of its head and tail: 8-digit id and parent, about.
_ID_GUESS = len(',"parentId":') + 2 * len('"0123abcd"')


def appended_bytes(args: Sequence[str]) -> int:
    """About the bytes append.lua stores for the entries of ``append_args`` (the quota's check
    before the script on a Redis Cluster; the script counts them exactly)."""
    return sum(utf8_len(args[at]) + utf8_len(args[at + 1]) + _ID_GUESS
               for at in range(1, 3 * int(args[0]), 3))


def import_args(session: Session, session_id: str, replace: bool) -> list[str]:
    header = dict(session.header)
    header["id"] = session_id
    check_json_value(header, source=session.source, line=1)
    args = ["1" if replace else "0", dump_record(header), ""]
    seen: set[str] = set()
    for entry in session.entries:
        if not entry.id:
            raise SessionFormatError("entry has no id", source=session.source, line=entry.line)
        if entry.id in seen:
            raise SessionFormatError(f"duplicate entry id {entry.id}", source=session.source,
                                     line=entry.line)
        seen.add(entry.id)
        check_entry(entry.raw, source=session.source, line=entry.line)
        args += [entry.id, dump_record(entry.raw)]
    if session.entries:
        args[2] = session.entries[-1].id
    return args


def parse_import(text: str, session_id: str | None, new_id: IdFactory,
                 source: str = "<import>") -> tuple[Session, str]:
    """The session to store, refused whole (nothing stored) when any line is unusable: a line
    that is not a JSON object, a parent that names no entry, a cycle (as ``inspect`` does)."""
    session = load_session(text, source=source, new_id=new_id)
    if session.warnings:
        more = len(session.warnings) - 1
        raise SessionFormatError(session.warnings[0].split(": ", 1)[1]
                                 + (f" (and {more} more such lines)" if more else ""),
                                 source=source, line=_warning_line(session.warnings[0]))
    session.tree().check_all()
    return session, check_session_id(session_id if session_id is not None else session.id)


def _warning_line(warning: str) -> int | None:
    """The line number of a ``source:line: problem`` warning."""
    where = warning.split(": ", 1)[0]
    number = where.rpartition(":")[2]
    return int(number) if number.isdigit() else None
