"""Lenient JSONL loading and lossless export of pi sessions (docs/rules.md "Session file",
"Version migrations")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from api_client.contract.errors import SessionFormatError
from api_client.contract.session._entries import Entry, JsonObject, parse_entry
from api_client.contract.session._migrate import IdFactory, migrate_records, random_entry_id
from api_client.contract.session._tree import SessionTree

__all__ = ["Session", "dump_record", "jsonl_lines", "load_session", "parse_records"]


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


def jsonl_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) split at ``\n`` only, a trailing ``\r`` dropped.

    Never ``str.splitlines()``: it also breaks at U+2028, U+2029, NEL and \x1c-\x1e, which
    ``JSON.stringify`` writes raw inside strings, so one entry would become two broken lines.
    """
    return [(number, line[:-1] if line.endswith("\r") else line)
            for number, line in enumerate(text.split("\n"), start=1)]


def _parse_line(line: str) -> tuple[JsonObject | None, str]:
    """The object of one line, or None and what is wrong with it."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        return None, f"not JSON ({err.msg})"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, ""


def parse_records(text: str, source: str) -> tuple[list[tuple[int, JsonObject]], list[str]]:
    """(line number, object) for every parsable line; unparsable lines become warnings."""
    records: list[tuple[int, JsonObject]] = []
    warnings: list[str] = []
    for number, line in jsonl_lines(text):
        if not line.strip():
            continue
        value, problem = _parse_line(line)
        if value is None:
            warnings.append(f"{source}:{number}: skipped a line that is {problem}")
            continue
        records.append((number, value))
    return records, warnings


def _check_header_line(text: str, source: str) -> None:
    """A broken first line is the header's problem, reported as that line (not the next one)."""
    first = next(((n, line) for n, line in jsonl_lines(text) if line.strip()), None)
    if first is None:
        raise SessionFormatError("empty session: no JSON lines", source=source)
    number, line = first
    value, problem = _parse_line(line)
    if value is None:
        raise SessionFormatError(f"first line is not a session header: it is {problem}",
                                 source=source, line=number)


def load_session(
    text: str, *, source: str = "<session>", new_id: IdFactory = random_entry_id
) -> Session:
    """Parse, migrate to v3 and type a session. Raises :class:`SessionFormatError` when unusable."""
    _check_header_line(text, source)
    numbered, warnings = parse_records(text, source)
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
