"""Sessions with U+2028/U+2029/NEL inside strings through the client and Redis (import, append,
load, export), sync and asyncio; a self-parent stored in Redis is a cycle on load."""

from __future__ import annotations

import asyncio
import json

import pytest

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient
from api_client.contract.errors import SessionCycleError
from api_client.contract.session import dump_record

HEADER = {"type": "session", "version": 3, "id": "sep", "timestamp": "2026-01-01T00:00:00.000Z",
          "cwd": "/"}
TEXTS = ["line\u2028separator", "para\u2029separator", "next\x85line"]


def _entries() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i, text in enumerate(TEXTS):
        out.append({"type": "message", "id": f"m{i}", "parentId": f"m{i - 1}" if i else None,
                    "timestamp": "2026-01-01T00:00:00.000Z",
                    "message": {"role": "user", "content": text, "timestamp": 1}})
    return out


def _jsonl(records: list[dict[str, object]]) -> str:
    return "\n".join(dump_record(r) for r in records) + "\n"


def _objects(text: str) -> list[object]:
    return [json.loads(line) for line in text.split("\n") if line]


def test_import_load_export_keep_every_entry(client: CompactionClient) -> None:
    records = [HEADER, *_entries()]
    sid = client.sessions.import_jsonl(_jsonl(records))
    snap = client.sessions.load(sid)
    assert snap.session.warnings == [] and snap.leaf_id == "m2"
    assert [e.raw["message"]["content"]  # type: ignore[index]
            for e in snap.session.entries] == TEXTS
    exported = client.sessions.export_jsonl(sid)
    assert _objects(exported) == records
    appended = client.sessions.append(sid, {"role": "user", "content": "more\u2028",
                                            "timestamp": 2})
    assert client.sessions.load(sid).session.tree().path_to(appended)[0].id == "m0"


def test_async_import_and_export_are_json_equal(settings: ClientSettings) -> None:
    async def run() -> str:
        async with AsyncCompactionClient(settings) as client:
            sid = await client.sessions.import_jsonl(_jsonl([HEADER, *_entries()]), "async-sep")
            return await client.sessions.export_jsonl(sid)

    assert _objects(asyncio.run(run())) == [{**HEADER, "id": "async-sep"}, *_entries()]


def test_a_self_parent_loaded_from_redis_is_a_cycle(client: CompactionClient) -> None:
    records = [HEADER, *_entries()]
    cyclic = {**records[3], "parentId": "m2"}  # m2 is its own parent
    with pytest.raises(SessionCycleError, match="entry m2 is its own parent"):
        client.sessions.import_jsonl(_jsonl([*records[:3], cyclic, *records[4:]]))
    # Import refuses it (nothing stored); one that got into Redis otherwise is a cycle on load.
    sid = client.sessions.import_jsonl(_jsonl(records))
    line = json.dumps(cyclic, ensure_ascii=False, separators=(",", ":"))
    client.redis.hset(client.layout.session(sid).entries, "m2", line)
    tree = client.sessions.load(sid).session.tree()
    with pytest.raises(SessionCycleError, match="entry m2 is its own parent"):
        tree.path_to(tree.leaf_id)
