"""The hook contract end to end: client → Redis → a real Celery worker (threads pool, in this
process) with the example plugin loaded through its entry point and the webhook adapter posting
to the example receiver; the model is an OpenAI-compatible loopback server."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks.hookkit import load_receiver
from llm.llm_fakes import FAST, FakeLLMServer, openai
from pydantic import SecretStr

from api_client import CompactionClient, JobCancelledError, JobFailedError
from worker.hooks import HookSettings

pytestmark = pytest.mark.integration

SECRET = "e2e-webhook-secret"
MODEL = "hook-e2e-model"
TS = "2026-01-01T00:00:{:02d}.000Z"


class Webhook:
    """The example receiver, recording verified events and answering what a test sets."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.server = load_receiver().make_server(SECRET.encode(), self.handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def handle(self, event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        self.seen.append((event, payload))
        answer: dict[str, Any] | None = self.answers.get(event)
        return answer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture(scope="module")
def stack(redis_proc: Any, model_server: FakeLLMServer, webhook: Webhook,
          example_plugin_path: Path) -> Iterator[CompactionClient]:
    """One worker for the module (starting one costs about a second), with the example plugin's
    entry point on the path when it loads its hooks."""
    from celery.contrib.testing.worker import start_worker

    from worker.celery_app import create_app
    from worker.llm.settings import ModelCandidate
    from worker.settings import WorkerSettings

    url = redis_proc.url
    # The webhook's deadline is wall-clock for the whole request: room for a busy machine.
    hooks = HookSettings(entry_points=["example"], timeout_s=1.0, webhook_url=webhook.url,
                         webhook_secret=SecretStr(SECRET), webhook_timeout_s=0.9)
    settings = WorkerSettings(
        redis_url=url, broker_url=None, result_backend=None, pool="threads", concurrency=2,
        tokenizer="estimate", keep_recent_tokens=60, hooks=hooks,
        models=[ModelCandidate.model_validate(openai(model_server, MODEL, api_key="sk-test"))],
        **FAST)
    app = create_app(settings)
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False,
                      loglevel="WARNING", shutdown_timeout=15), \
            CompactionClient(url) as client:
        yield client
    app.close_runtime()


@pytest.fixture
def plugin(example_plugin: Any, model_server: FakeLLMServer, webhook: Webhook) -> Any:
    model_server.seen.clear()
    webhook.seen.clear()
    webhook.answers.clear()
    return example_plugin


def _session_text(sid: str) -> str:
    """u1 a1 t1 a2 u2 a3 t2 a4: two turns, long enough that a compaction keeps only the last."""
    pad = " lorem ipsum" * 30
    rows: list[dict[str, Any]] = [
        {"id": "u1", "message": {"role": "user", "content": "Fix the CSV importer." + pad}},
        {"id": "a1", "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "c1", "name": "read",
             "arguments": {"path": "importer.py"}}]}},
        {"id": "t1", "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "read",
                                 "content": [{"type": "text", "text": "def load():" + pad}],
                                 "isError": False}},
        {"id": "a2", "message": {"role": "assistant",
                                 "content": [{"type": "text", "text": "Fixed." + pad}]}},
        {"id": "u2", "message": {"role": "user", "content": "Now add tests." + pad}},
        {"id": "a3", "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "c2", "name": "write",
             "arguments": {"path": "test_importer.py"}}]}},
        {"id": "t2", "message": {"role": "toolResult", "toolCallId": "c2", "toolName": "write",
                                 "content": [{"type": "text", "text": "ok"}], "isError": False}},
        {"id": "a4", "message": {"role": "assistant",
                                 "content": [{"type": "text", "text": "Tests added."}],
                                 "usage": {"input": 900, "output": 50, "totalTokens": 950}}},
    ]
    lines = [{"type": "session", "version": 3, "id": sid, "timestamp": TS.format(0),
              "cwd": "/repo"}]
    parent = None
    for n, row in enumerate(rows, start=1):
        message = {**row["message"], "timestamp": n}
        lines.append({"type": "message", "id": row["id"], "parentId": parent,
                      "timestamp": TS.format(n), "message": message})
        parent = row["id"]
    return "\n".join(json.dumps(line) for line in lines) + "\n"


@pytest.fixture
def sid(stack: CompactionClient) -> str:
    session_id = f"hooks-{uuid.uuid4().hex[:10]}"
    stack.sessions.import_jsonl(_session_text(session_id), session_id)
    return session_id


def _calls(plugin: Any, event: str) -> list[dict[str, Any]]:
    return [call for call in plugin.CALLS if call["event"] == event]


def _model_requests(server: FakeLLMServer) -> list[str]:
    return [json.dumps(seen.body) for seen in server.seen if seen.key == MODEL]


# -- session_before_compact ---------------------------------------------------------------------
def test_before_compact_cancel(stack: CompactionClient, sid: str, plugin: Any,
                               model_server: FakeLLMServer) -> None:
    plugin.configure(before_compact="cancel")
    before = stack.sessions.export_jsonl(sid)
    with pytest.raises(JobCancelledError):
        stack.compact(sid).wait(timeout=20)
    assert stack.sessions.export_jsonl(sid) == before
    assert _model_requests(model_server) == []
    assert [c["session_id"] for c in _calls(plugin, "session_before_compact")] == [sid]
    assert _calls(plugin, "session_compacting") == [] and _calls(plugin, "session_compact") == []


def test_before_compact_custom_compaction(stack: CompactionClient, sid: str, plugin: Any,
                                          model_server: FakeLLMServer, webhook: Webhook) -> None:
    plugin.configure(before_compact={"compaction": {
        "summary": "Summary written by the platform.", "preserveData": {"artifacts": ["a.md"]}}})
    entry = stack.compact(sid, instructions="keep it short").wait(timeout=20)
    # The platform's text is kept; the fact ledger appends the request it lost and, since the
    # hook wrote no file lists, the plan's tags (docs/fact-ledger.md).
    summary, _, block = entry["summary"].partition("\n\n<session-facts>\n")
    assert summary == "Summary written by the platform."
    block, _, tags = block.partition("\n</session-facts>")
    assert block.startswith("requests:\n- Fix the CSV importer.") and "importer.py" not in block
    assert tags == "\n\n<read-files>\nimporter.py\n</read-files>"
    assert entry["details"]["facts"]["requests"]["appended"] == 1
    assert entry["fromExtension"] is True
    assert entry["preserveData"] == {"artifacts": ["a.md"]}
    assert entry["firstKeptEntryId"] == (
        _calls(plugin, "session_before_compact")[0]["first_kept_entry_id"])
    assert entry["tokensBefore"] == 950
    assert _model_requests(model_server) == []  # no model call
    assert _calls(plugin, "session_before_compact")[0]["custom_instructions"] == "keep it short"
    assert _calls(plugin, "session_compacting") == []  # not emitted after a hook compaction
    snap = stack.sessions.load(sid)
    assert snap.leaf_id == entry["id"] and snap.session.tree().by_id[entry["id"]].raw == entry
    # session_compact: after commit, carrying the written entry, to plugins and the webhook.
    (done,) = _calls(plugin, "session_compact")
    assert done["entry"] == entry and done["from_extension"] is True
    compact_posts = [p for e, p in webhook.seen if e == "session_compact"]
    assert compact_posts == [{"event": "session_compact", "sessionId": sid,
                              "compactionEntry": entry, "fromExtension": True}]


def test_invalid_custom_compaction_is_rejected(stack: CompactionClient, sid: str, plugin: Any,
                                               model_server: FakeLLMServer) -> None:
    plugin.configure(before_compact={"compaction": {"summary": "bad", "firstKeptEntryId": "t1"}})
    before = stack.sessions.export_jsonl(sid)
    with pytest.raises(JobFailedError, match="firstKeptEntryId t1 is a tool result"):
        stack.compact(sid).wait(timeout=20)
    assert stack.sessions.export_jsonl(sid) == before
    assert _model_requests(model_server) == [] and _calls(plugin, "session_compact") == []


def test_webhook_cancel(stack: CompactionClient, sid: str, plugin: Any, webhook: Webhook) -> None:
    webhook.answers["session_before_compact"] = {"cancel": True}
    before = stack.sessions.export_jsonl(sid)
    with pytest.raises(JobCancelledError):
        stack.compact(sid).wait(timeout=20)
    assert stack.sessions.export_jsonl(sid) == before
    (payload,) = [p for e, p in webhook.seen if e == "session_before_compact"]
    assert payload["sessionId"] == sid
    assert [e["id"] for e in payload["branchEntries"]] == [
        "u1", "a1", "t1", "a2", "u2", "a3", "t2", "a4"]


# -- session_compacting -------------------------------------------------------------------------
def test_compacting_context_prompt_and_preserve_data(stack: CompactionClient, sid: str, plugin: Any,
                                                     model_server: FakeLLMServer) -> None:
    plugin.configure(compacting={"context": ["ACME-CONTEXT-LINE owns this session."],
                                 "prompt": "ACME-BASE-PROMPT: summarise for billing.",
                                 "preserveData": {"ticket": 4711}})
    entry = stack.compact(sid, reason="threshold").wait(timeout=20)
    assert entry["fromExtension"] is False
    assert entry["preserveData"] == {"ticket": 4711}
    requests = _model_requests(model_server)
    assert requests, "the model was not called"
    assert any("ACME-BASE-PROMPT" in body and "ACME-CONTEXT-LINE" in body for body in requests)
    # The context lines reach both the history and the short-summary prompt.
    assert sum("ACME-CONTEXT-LINE" in body for body in requests) >= 2
    (compacting,) = _calls(plugin, "session_compacting")
    assert compacting["session_id"] == sid and compacting["messages"] > 0
    (done,) = _calls(plugin, "session_compact")
    assert done["entry"] == entry and done["from_extension"] is False


def test_webhook_compacting_answer_reaches_the_model(stack: CompactionClient, sid: str, plugin: Any,
                                                     model_server: FakeLLMServer,
                                                     webhook: Webhook) -> None:
    webhook.answers["session_compacting"] = {"context": ["WEBHOOK-CONTEXT"],
                                             "preserveData": {"from": "webhook"}}
    entry = stack.compact(sid).wait(timeout=20)
    assert entry["preserveData"] == {"from": "webhook"}
    assert any("WEBHOOK-CONTEXT" in body for body in _model_requests(model_server))


def test_raising_and_slow_hooks_are_skipped(stack: CompactionClient, sid: str, plugin: Any,
                                            model_server: FakeLLMServer) -> None:
    plugin.configure(before_compact="raise", compacting={"sleep": 3})
    entry = stack.compact(sid).wait(timeout=20)
    assert entry["fromExtension"] is False and "preserveData" not in entry
    assert _model_requests(model_server)  # the default behaviour: the model summarised
    assert len(_calls(plugin, "session_compacting")) == 1


# -- session_before_tree / session_tree ---------------------------------------------------------
def test_before_tree_cancel(stack: CompactionClient, sid: str, plugin: Any,
                            model_server: FakeLLMServer) -> None:
    plugin.configure(before_tree="cancel")
    before = stack.sessions.export_jsonl(sid)
    with pytest.raises(JobCancelledError, match="Branch summary cancelled"):
        stack.branch_summary(sid, "a1").wait(timeout=20)
    assert stack.sessions.export_jsonl(sid) == before
    assert _model_requests(model_server) == []
    (call,) = _calls(plugin, "session_before_tree")
    assert (call["target_id"], call["old_leaf_id"], call["entries"],
            call["user_wants_summary"]) == (
        "a1", "a4", ["t1", "a2", "u2", "a3", "t2", "a4"], True)
    assert _calls(plugin, "session_tree") == []


def test_before_tree_hook_summary(stack: CompactionClient, sid: str, plugin: Any,
                                  model_server: FakeLLMServer, webhook: Webhook) -> None:
    plugin.configure(before_tree={"summary": {"summary": "The platform's branch summary.",
                                              "details": {"ticket": 1}}})
    entry = stack.branch_summary(sid, "a1").wait(timeout=20)
    assert entry["type"] == "branch_summary" and entry["parentId"] == "a1"
    assert entry["summary"] == "The platform's branch summary."
    assert entry["details"] == {"ticket": 1} and entry["fromExtension"] is True
    assert _model_requests(model_server) == []
    assert stack.sessions.load(sid).leaf_id == entry["id"]
    (tree,) = _calls(plugin, "session_tree")
    assert tree == {"event": "session_tree", "session_id": sid, "new_leaf_id": entry["id"],
                    "old_leaf_id": "a4", "summary_entry": entry, "from_extension": True}
    posts = [p for e, p in webhook.seen if e == "session_tree"]
    assert posts == [{"event": "session_tree", "sessionId": sid, "newLeafId": entry["id"],
                      "oldLeafId": "a4", "summaryEntry": entry, "fromExtension": True}]


def test_invalid_tree_summary_is_rejected(stack: CompactionClient, sid: str, plugin: Any) -> None:
    plugin.configure(before_tree={"summary": {"summary": "   "}})
    before = stack.sessions.export_jsonl(sid)
    with pytest.raises(JobFailedError, match="summary must be non-empty text"):
        stack.branch_summary(sid, "a1").wait(timeout=20)
    assert stack.sessions.export_jsonl(sid) == before


def test_tree_notification_after_a_model_summary(stack: CompactionClient, sid: str, plugin: Any,
                                                 model_server: FakeLLMServer) -> None:
    entry = stack.branch_summary(sid, "u2").wait(timeout=20)
    assert entry["fromExtension"] is False and _model_requests(model_server)
    (tree,) = _calls(plugin, "session_tree")
    assert tree["new_leaf_id"] == entry["id"] and tree["summary_entry"] == entry
    assert tree["from_extension"] is False and tree["old_leaf_id"] == "a4"
