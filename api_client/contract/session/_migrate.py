"""Version migrations v1 → v2 → v3 (docs/rules.md "Version migrations")."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from api_client.contract.session._entries import JsonObject

__all__ = ["CURRENT_VERSION", "IdFactory", "migrate_records", "random_entry_id", "record_version"]

CURRENT_VERSION = 3

# Takes the ids already used in the session, returns a fresh one.
IdFactory = Callable[[set[str]], str]


def random_entry_id(used: set[str]) -> str:
    """pi's id: the last 8 hex digits of a UUIDv4, retried to avoid collisions."""
    for _ in range(100):
        candidate = uuid.uuid4().hex[-8:]
        if candidate not in used:
            return candidate
    return uuid.uuid4().hex


def record_version(records: list[JsonObject]) -> int:
    for record in records:
        if record.get("type") == "session":
            version = record.get("version", 1)
            return version if isinstance(version, int) else 1
    return 1


def _migrate_v1_to_v2(records: list[JsonObject], new_id: IdFactory) -> None:
    used: set[str] = set()
    previous: str | None = None
    for record in records:
        if record.get("type") == "session":
            record["version"] = 2
            continue
        entry_id = new_id(used)
        used.add(entry_id)  # Q12: every generated id is tracked
        record["id"] = entry_id
        record["parentId"] = previous
        previous = entry_id
    # Q13: resolve indices only after every entry has its id, so forward indices work too.
    for record in records:
        if record.get("type") != "compaction" or "firstKeptEntryIndex" not in record:
            continue
        index = record.pop("firstKeptEntryIndex")
        if isinstance(index, int) and 0 <= index < len(records):
            target = records[index]
            if target.get("type") != "session" and isinstance(target.get("id"), str):
                record["firstKeptEntryId"] = target["id"]


def _migrate_v2_to_v3(records: list[JsonObject]) -> None:
    for record in records:
        if record.get("type") == "session":
            record["version"] = 3
        elif record.get("type") == "message":
            message = record.get("message")
            if isinstance(message, dict) and message.get("role") == "hookMessage":
                message["role"] = "custom"


def migrate_records(records: list[JsonObject], new_id: IdFactory = random_entry_id) -> int:
    """Migrate header + entries in place to v3. Returns the version the records had before."""
    version = record_version(records)
    if version < 2:
        _migrate_v1_to_v2(records, new_id)
    if version < 3:
        _migrate_v2_to_v3(records)
    return version
