"""docs/compaction.md "Tool pairs" end to end: a compaction committed while a tool ran never orphans
its result."""

from __future__ import annotations

import pytest

from api_client import CompactionClient
from worker.compaction import build_session_context
from worker.compaction.toolpairs import orphaned_tool_results


def _call() -> dict[str, object]:
    return {"role": "assistant", "provider": "p", "model": "m", "stopReason": "toolUse",
            "timestamp": 2,
            "content": [{"type": "toolCall", "id": "call-1", "name": "bash",
                         "arguments": {"command": "pytest -q tests/"}}]}


def _result() -> dict[str, object]:
    lines = "\n".join(f"tests/test_mod{i}.py::test_case_{i} PASSED" for i in range(6000))
    return {"role": "toolResult", "toolCallId": "call-1", "toolName": "bash", "isError": False,
            "timestamp": 3, "content": [{"type": "text", "text": lines}]}


@pytest.mark.parametrize("reason", ["manual", "threshold", "overflow"])
def test_result_arriving_after_a_commit_keeps_its_call(client: CompactionClient,
                                                       reason: str) -> None:
    sid = client.sessions.create(cwd="/repo")
    client.sessions.append_many(sid, [
        {"role": "user", "content": "Run the whole test suite, please.", "timestamp": 1}, _call()])
    call_id = client.sessions.load(sid).leaf_id
    first = client.compact(sid, reason="manual").wait(30)  # committed while the tool runs
    assert isinstance(first, dict) and first["type"] == "compaction"
    result_id = client.sessions.append(sid, _result())    # the tool's large result arrives
    second = client.compact(sid, reason=reason).wait(30)
    assert isinstance(second, dict) and second["parentId"] == result_id
    assert second["firstKeptEntryId"] == call_id            # the reference keeps from the result
    snap = client.sessions.load(sid)
    context = build_session_context(snap.session.tree(), snap.leaf_id)
    messages = [m.message for m in context.messages]
    assert [m["role"] for m in messages] == ["compactionSummary", "assistant", "toolResult"]
    assert orphaned_tool_results(messages) == []
