"""Lenient JSONL loading and lossless export of pi sessions (SPEC §1.1, §1.5)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from api_client.errors import SessionFormatError
from api_client.session._entries import Entry, JsonObject, parse_entry
from api_client.session._migrate import IdFactory, migrate_records, random_entry_id
from api_client.session._tree import SessionTree

__all__ = ["Session", "dump_record", "load_session", "parse_records"]


def dump_record(record: JsonObject) -> str:
    """One JSONL line. Non-ASCII stays as is, like JSON.stringify."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Session:
    header: JsonObject
    entries: list[Entry]
    source: str = "<session>"
    original_version: int = 3
    warnings: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.header.get("id", ""))

    def tree(self) -> SessionTree:
        return SessionTree(self.entries, self.source)

    def to_jsonl(self) -> str:
        lines = [dump_record(self.header)] + [dump_record(e.raw) for e in self.entries]
        return "\n".join(lines) + "\n"


def parse_records(text: str, source: str) -> tuple[list[tuple[int, JsonObject]], list[str]]:
    """(line number, object) for every parsable line; unparsable lines become warnings."""
    records: list[tuple[int, JsonObject]] = []
    warnings: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            warnings.append(f"{source}:{number}: skipped a line that is not JSON ({err.msg})")
            continue
        if not isinstance(value, dict):
            warnings.append(f"{source}:{number}: skipped a line that is not a JSON object")
            continue
        records.append((number, value))
    return records, warnings


def load_session(
    text: str, *, source: str = "<session>", new_id: IdFactory = random_entry_id
) -> Session:
    """Parse, migrate to v3 and type a session. Raises :class:`SessionFormatError` when unusable."""
    numbered, warnings = parse_records(text, source)
    if not numbered:
        raise SessionFormatError("empty session: no JSON lines", source=source)
    first_line, header = numbered[0]
    if header.get("type") != "session" or not isinstance(header.get("id"), str):
        raise SessionFormatError(
            "first line is not a session header (type 'session' with a string id)",
            source=source,
            line=first_line,
        )
    records = [record for _, record in numbered]
    version = migrate_records(records, new_id)
    entries: list[Entry] = []
    for (number, record) in numbered[1:]:
        if record.get("type") == "session":
            raise SessionFormatError("a second session header", source=source, line=number)
        entries.append(parse_entry(record, source=source, line=number))
    return Session(header, entries, source, version, warnings)
