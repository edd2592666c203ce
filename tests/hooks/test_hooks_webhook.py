"""The webhook adapter against the example receiver on a loopback port (real HTTP)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hooks.hookkit import load_receiver
from pydantic import SecretStr

from api_client.contract.session import Entry
from worker.compaction import Preparation
from worker.hooks import HookLoadError, HookSettings, load_hook_runner
from worker.hooks.webhook import WebhookError, WebhookPlugin, check_webhook_url, sign

SECRET = "s3cret-for-tests"
receiver = load_receiver()


class Receiver:
    """The example receiver with a programmable answer; records verified requests only."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.delay_s = 0.0
        self.server = receiver.make_server(SECRET.encode(), self.handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"

    def handle(self, event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        self.seen.append((event, payload))
        time.sleep(self.delay_s)
        answer = self.answers.get(event)
        return answer(payload) if callable(answer) else answer


@pytest.fixture
def server() -> Iterator[Receiver]:
    rec = Receiver()
    thread = threading.Thread(target=rec.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def _runner(url: str, secret: str = SECRET, timeout_s: float = 5.0) -> Any:
    return load_hook_runner(HookSettings(entry_points=False, webhook_url=url,
                                         webhook_secret=SecretStr(secret),
                                         webhook_timeout_s=timeout_s))


def test_before_compact_roundtrip(server: Receiver, path: list[Entry],
                                  preparation: Preparation) -> None:
    server.answers["session_before_compact"] = {
        "compaction": {"summary": "remote", "firstKeptEntryId": "u2", "tokensBefore": 99,
                       "preserveData": {"ticket": 7}}}
    result = _runner(server.url).before_compact(preparation, path, "be brief", None,
                                                session_id="s1")
    assert result.compaction == {"summary": "remote", "firstKeptEntryId": "u2", "tokensBefore": 99,
                                 "preserveData": {"ticket": 7}, "fromExtension": True}
    (event, payload), = server.seen
    assert event == "session_before_compact" and payload["sessionId"] == "s1"
    assert payload["customInstructions"] == "be brief"
    assert [entry["id"] for entry in payload["branchEntries"]] == ["u1", "a1", "t1", "u2", "a2"]
    plan = payload["preparation"]
    assert plan["firstKeptEntryId"] == "u2" and plan["tokensBefore"] == 1234
    assert plan["readFiles"] == ["a.py"] and plan["previousSummary"] is None
    assert plan["messagesToSummarize"][0] == {"role": "user", "content": "fix the importer",
                                              "timestamp": 1}
    assert plan["settings"] == {"keepRecentTokens": 20000, "reserveTokens": 16384}


def test_before_compact_cancel(server: Receiver, path: list[Entry],
                               preparation: Preparation) -> None:
    server.answers["session_before_compact"] = {"cancel": True}
    result = _runner(server.url).before_compact(preparation, path, None, None)
    assert result is not None and result.cancel


def test_compacting_roundtrip(server: Receiver) -> None:
    server.answers["session_compacting"] = {"context": ["line 1", "line 2"], "prompt": "Summarise.",
                                            "preserveData": {"k": [1, 2]}}
    result = _runner(server.url).compacting("s2", [{"role": "user", "content": "x"}])
    assert (result.context, result.prompt, result.preserve_data) == (
        ["line 1", "line 2"], "Summarise.", {"k": [1, 2]})
    assert server.seen == [("session_compacting", {"event": "session_compacting", "sessionId": "s2",
                                                   "messages": [{"role": "user", "content": "x"}]})]


def test_tree_roundtrip_and_notifications(server: Receiver, path: list[Entry]) -> None:
    server.answers["session_before_tree"] = {"summary": {"summary": "remote branch summary"}}
    runner = _runner(server.url)
    plan = {"targetId": "u1", "oldLeafId": "a2", "commonAncestorId": "u1",
            "entriesToSummarize": path[1:], "userWantsSummary": True}
    result = runner.before_tree(plan, None, session_id="s3")
    assert result.summary == {"summary": "remote branch summary", "fromExtension": True}
    entry = {"type": "branch_summary", "id": "b1", "parentId": "u1",
             "summary": "remote branch summary"}
    runner.tree_done("b1", "a2", entry, True, session_id="s3")
    runner.compact_done({"type": "compaction", "id": "c1"}, False, session_id="s3")
    events = [event for event, _ in server.seen]
    assert events == ["session_before_tree", "session_tree", "session_compact"]
    tree_plan = server.seen[0][1]["preparation"]
    assert tree_plan["userWantsSummary"] is True
    assert [e["id"] for e in tree_plan["entriesToSummarize"]] == ["a1", "t1", "u2", "a2"]
    assert server.seen[1][1] == {"event": "session_tree", "sessionId": "s3", "newLeafId": "b1",
                                 "oldLeafId": "a2", "summaryEntry": entry, "fromExtension": True}
    assert server.seen[2][1]["compactionEntry"] == {"type": "compaction", "id": "c1"}


def test_bad_secret_is_refused_by_the_receiver(server: Receiver,
                                               caplog: pytest.LogCaptureFixture) -> None:
    server.answers["session_compacting"] = {"prompt": "should never be used"}
    assert _runner(server.url, secret="wrong-secret").compacting("s", []) is None
    assert server.seen == []  # refused before the handler
    assert "HTTP 401" in caplog.text
    plugin = WebhookPlugin(server.url, "wrong-secret")
    with pytest.raises(WebhookError, match="HTTP 401"):
        plugin.post("session_compacting", "s", {"messages": []})


def test_webhook_timeout_is_a_skipped_hook(server: Receiver) -> None:
    server.delay_s = 1.5
    server.answers["session_compacting"] = {"prompt": "too late"}
    started = time.monotonic()
    with pytest.raises(WebhookError, match="Timeout"):
        WebhookPlugin(server.url, SECRET, timeout_s=0.3).post("session_compacting", "s", {})
    assert time.monotonic() - started < 1.4
    assert _runner(server.url, timeout_s=0.3).compacting("s", []) is None


@pytest.mark.parametrize(
    ("answer", "problem"),
    [(lambda p: ["not", "an", "object"], "must be a JSON object"),
     (lambda p: "text", "must be a JSON object")],
)
def test_unusable_answers_raise(server: Receiver, answer: Callable[[Any], Any],
                                problem: str) -> None:
    server.answers["session_compacting"] = answer
    with pytest.raises(WebhookError, match=problem):
        WebhookPlugin(server.url, SECRET).post("session_compacting", "s", {})


def test_no_content_is_no_answer(server: Receiver) -> None:
    assert WebhookPlugin(server.url, SECRET).post("session_compacting", "s", {}) is None
    assert [event for event, _ in server.seen] == ["session_compacting"]


def test_signature_covers_timestamp_and_body() -> None:
    body = b'{"event":"session_compact"}'
    header = sign(SECRET.encode(), "1700000000", body)
    now = 1700000000 + 10
    assert receiver.verify(SECRET.encode(), "1700000000", body, header, now=now)


@pytest.mark.parametrize(
    ("secret", "timestamp", "body", "now"),
    [
        ("other", "1700000000", b"{}", 1700000000),          # wrong secret
        (SECRET, "1700000000", b"{ }", 1700000000),          # body changed
        (SECRET, "1700000001", b"{}", 1700000000),           # timestamp changed
        (SECRET, "1700000000", b"{}", 1700000000 + 301),     # replayed later
        (SECRET, "soon", b"{}", 1700000000),                 # not a timestamp
    ],
    ids=["secret", "body", "timestamp", "replay", "garbage"],
)
def test_receiver_refuses_bad_signatures(secret: str, timestamp: str, body: bytes,
                                         now: int) -> None:
    header = sign(SECRET.encode(), "1700000000", b"{}")
    assert not receiver.verify(secret.encode(), timestamp, body, header, now=now)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://hooks.example.com/x", True),
        ("http://127.0.0.1:8080/x", True),
        ("http://localhost/x", True),
        ("http://[::1]:9000/", True),
        ("http://127.8.9.10/", True),
        ("http://hooks.example.com/x", False),
        ("http://10.0.0.1/x", False),
        ("http://localhost.evil.com/", False),
        ("ftp://127.0.0.1/", False),
        ("127.0.0.1:80", False),
        ("https:///nohost", False),
    ],
)
def test_https_only_unless_loopback(url: str, ok: bool) -> None:
    if ok:
        assert check_webhook_url(url).host
    else:
        with pytest.raises(HookLoadError):
            check_webhook_url(url)


def test_settings_refuse_insecure_or_unsigned_webhooks() -> None:
    with pytest.raises(HookLoadError, match="must use https"):
        _runner("http://hooks.example.com/")
    with pytest.raises(HookLoadError, match="webhook_secret must be set"):
        load_hook_runner(HookSettings(entry_points=False, webhook_url="https://hooks.example.com/"))
    plugin = WebhookPlugin("https://hooks.example.com/", SECRET)
    assert SECRET not in repr(plugin)
