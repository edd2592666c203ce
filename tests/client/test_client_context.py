"""client.context(): the model-ready context of the current leaf, read from Redis."""

from __future__ import annotations

import asyncio

import pytest

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient
from api_client.contract.errors import SessionNotFoundError
from api_client.contract.session.convert import compaction_context_intro

TOOL_CALL = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}


def conversation(client: CompactionClient, sid: str) -> list[str]:
    return client.sessions.append_many(sid, [
        {"role": "user", "content": "list files", "timestamp": 1},
        {"role": "assistant", "content": [TOOL_CALL], "provider": "p", "model": "m",
         "timestamp": 2},
        {"role": "toolResult", "toolCallId": "c1", "toolName": "bash",
         "content": [{"type": "text", "text": "a.py"}], "isError": False, "timestamp": 3},
        {"role": "bashExecution", "command": "pwd", "output": "/repo", "exitCode": 0,
         "timestamp": 4},
    ])


def test_context_of_plain_session(client: CompactionClient) -> None:
    sid = client.sessions.create(cwd="/repo")
    assert client.context(sid).messages == []
    ids = conversation(client, sid)
    ctx = client.context(sid)
    assert [m["role"] for m in ctx.messages] == ["user", "assistant", "toolResult", "user"]
    assert ctx.messages[3]["content"][0]["text"].startswith("Ran `pwd`")
    assert [m.entry_id for m in ctx.session.messages] == ids
    assert ctx.leaf_id == ids[-1]
    assert ctx.revision == client.sessions.revision(sid)
    assert ctx.models == {"default": "p/m"}


def test_context_after_compaction_and_navigation(client: CompactionClient) -> None:
    sid = client.sessions.create()
    ids = conversation(client, sid)
    comp = client.sessions.append(sid, {"type": "compaction", "summary": "did ls",
                                        "firstKeptEntryId": ids[3], "tokensBefore": 900})
    ctx = client.context(sid)
    first = ctx.messages[0]
    assert first["role"] == "user"
    assert first["content"][0]["text"] == (
        f"{compaction_context_intro()}\n\n<summary>\ndid ls\n</summary>")
    assert [m.entry_id for m in ctx.session.messages] == [comp, ids[3]]
    client.sessions.navigate(sid, ids[0])
    assert [m["role"] for m in client.context(sid).messages] == ["user"]
    client.sessions.navigate(sid, None)  # a reset leaf: the next append starts a new root
    assert client.context(sid).messages == []


def test_missing_session(client: CompactionClient) -> None:
    with pytest.raises(SessionNotFoundError):
        client.context("nope")


def test_async_context(settings: ClientSettings, client: CompactionClient) -> None:
    sid = client.sessions.create()
    conversation(client, sid)

    async def run() -> list[str]:
        async with AsyncCompactionClient(settings) as ac:
            return [m["role"] for m in (await ac.context(sid)).messages]

    assert asyncio.run(run()) == ["user", "assistant", "toolResult", "user"]
