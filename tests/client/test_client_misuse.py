"""Misuse of the store fails loudly, typed, before Redis: the stored session stays as it was."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import pytest

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient
from api_client.contract.errors import (
    InvalidEntryError,
    InvalidTextError,
    MessageSchemaError,
    NestingTooDeepError,
    NonFiniteNumberError,
    UnsafeEntryIdError,
    UnserializableValueError,
)


def deep(n: int) -> Any:
    value: Any = 0
    for _ in range(n):
        value = [value]
    return value


USER = {"role": "user", "content": "hi", "timestamp": 1}
BAD_APPENDS = [
    ({**USER, "timestamp": datetime.datetime(2025, 1, 1)}, UnserializableValueError),
    ({**USER, "timestamp": float("nan")}, NonFiniteNumberError),
    ({**USER, "score": float("inf")}, NonFiniteNumberError),
    ({"role": "toolResult", "toolName": "bash", "content": []}, MessageSchemaError),
    ({"role": "assistant", "content": "not blocks"}, MessageSchemaError),
    ({"content": "no role"}, MessageSchemaError),
    ({"role": "user"}, MessageSchemaError),
    ({**USER, "content": "\ud83d"}, InvalidTextError),
    ({**USER, "args": deep(100_000)}, NestingTooDeepError),
    ({"type": "message", "id": 'x"y', "message": USER}, UnsafeEntryIdError),
    ({"type": "message", "id": "x\ny", "message": USER}, UnsafeEntryIdError),
]


@pytest.mark.parametrize(("item", "error"), BAD_APPENDS)
def test_append_refused(client: CompactionClient, item: dict[str, Any],
                        error: type[InvalidEntryError]) -> None:
    sid = client.sessions.create()
    client.sessions.append(sid, USER)
    before = (client.sessions.export_jsonl(sid), client.sessions.revision(sid))
    with pytest.raises(error):
        client.sessions.append(sid, item)
    with pytest.raises(error):
        client.sessions.append_many(sid, [USER, item])  # all or nothing
    assert (client.sessions.export_jsonl(sid), client.sessions.revision(sid)) == before


@pytest.mark.parametrize(("item", "error"), BAD_APPENDS[:4])
def test_async_append_refused(settings: ClientSettings, client: CompactionClient,
                              item: dict[str, Any], error: type[InvalidEntryError]) -> None:
    sid = client.sessions.create()

    async def run() -> None:
        async with AsyncCompactionClient(settings) as ac:
            with pytest.raises(error):
                await ac.sessions.append(sid, item)

    asyncio.run(run())
    assert client.sessions.load(sid).session.entries == []


HEADER = '{"type":"session","version":3,"id":"imp","timestamp":"2025-01-01T00:00:00Z","cwd":""}'


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('{"type":"message","id":"a1","parentId":null,"timestamp":"t",'
         '"message":{"role":"user","content":"x","timestamp":NaN}}', NonFiniteNumberError),
        ('{"type":"message","id":"a1","parentId":null,"timestamp":"t",'
         '"message":{"role":"user","content":"\\ud800"}}', InvalidTextError),
        ('{"type":"message","id":"a1","parentId":null,"timestamp":"t",'
         '"message":{"role":"toolResult","content":[]}}', MessageSchemaError),
        ('{"type":"message","id":"a\\"1","parentId":null,"timestamp":"t",'
         '"message":{"role":"user","content":"x"}}', UnsafeEntryIdError),
    ],
)
def test_import_refused(client: CompactionClient, line: str,
                        error: type[InvalidEntryError]) -> None:
    with pytest.raises(error, match=r"<import>:2: "):
        client.sessions.import_jsonl(HEADER + "\n" + line + "\n")
    assert not client.sessions.exists("imp")


def test_create_refuses_bad_title(client: CompactionClient) -> None:
    with pytest.raises(InvalidTextError):
        client.sessions.create("t1", title="bad \udc80")
    assert not client.sessions.exists("t1")


def test_export_stays_json(client: CompactionClient) -> None:
    sid = client.sessions.create()
    client.sessions.append(sid, {**USER, "content": "ünïcødé 🎉", "n": 1.5})
    for line in client.sessions.export_jsonl(sid).splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in export"))


def test_bad_branch_target(client: CompactionClient) -> None:
    sid = client.sessions.create()
    with pytest.raises(UnsafeEntryIdError):
        client.branch_summary(sid, target_id="x'; DROP")
