"""Jobs over HTTP against a real worker: 202 then the record by long poll, 200 when a draft
applies, cancel, and the events as SSE (resumable with Last-Event-ID, keepalives)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from llm.llm_fakes import FakeLLMServer, hang

from helpers.waits import wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = (REPO / "worker" / "data" / "demo-session.jsonl").read_text(encoding="utf-8")
MODEL = "loop"


def demo_session(http: httpx.Client) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    assert http.put(f"/v1/sessions/{name}/jsonl", content=DEMO.encode()).status_code == 201
    return name


def finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    record: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"wait": 20}).json()
    assert record["state"] in ("succeeded", "failed", "cancelled"), record
    return record


def test_compact_is_202_and_the_long_poll_returns_the_entry(http: httpx.Client) -> None:
    name = demo_session(http)
    accepted = http.post(f"/v1/sessions/{name}/compact",
                         json={"reason": "manual", "instructions": "Keep the importer notes"})
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["jobId"]
    assert accepted.headers["location"] == f"/v1/jobs/{job_id}"
    again = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"})
    assert again.status_code == 202  # coalesced into job_id while it runs, else a new job
    record = finished(http, job_id)
    assert record["state"] == "succeeded" and record["kind"] == "compact"
    assert record["entry"]["type"] == "compaction" and record["model"]
    assert "Keep the importer notes" in str(http.get(f"/v1/jobs/{job_id}").json()["instructions"])
    context = http.get(f"/v1/sessions/{name}/context").json()
    assert "summary" in context["messages"][0]["content"][0]["text"]


def test_a_second_compact_while_the_first_runs_coalesces_into_it(
        http: httpx.Client, model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, *[hang() for _ in range(8)])  # the job stays in flight
    name = demo_session(http)
    first = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"})
    assert first.status_code == 202 and first.json()["coalesced"] is False
    job_id = first.json()["jobId"]
    wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["state"] == "running",
               what="the first job running")
    again = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"})
    assert again.status_code == 202, again.text
    assert again.json() == {**first.json(), "coalesced": True}  # the same jobId
    assert again.headers["location"] == f"/v1/jobs/{job_id}"
    assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert finished(http, job_id)["state"] == "cancelled"


def test_a_threshold_compaction_with_a_draft_is_200_with_the_entry(http: httpx.Client) -> None:
    name = demo_session(http)
    speculative = http.post(f"/v1/sessions/{name}/compact", json={"reason": "speculative"})
    assert finished(http, speculative.json()["jobId"])["state"] == "succeeded"
    applied = http.post(f"/v1/sessions/{name}/compact",
                        json={"reason": "threshold", "contextWindow": 200_000})
    assert applied.status_code == 200, applied.text
    body = applied.json()
    assert body["fromDraft"] is True and body["entry"]["type"] == "compaction"
    assert http.get(f"/v1/sessions/{name}").json()["leafId"] == body["entry"]["id"]


def test_prune_and_branch_summary(http: httpx.Client) -> None:
    name = demo_session(http)
    pruned = http.post(f"/v1/sessions/{name}/prune")
    assert pruned.status_code == 202
    assert finished(http, pruned.json()["jobId"])["state"] == "succeeded"
    entries = http.get(f"/v1/sessions/{name}").json()["entries"]
    target = next(e["id"] for e in entries if e["type"] == "message")
    moved = http.post(f"/v1/sessions/{name}/branch-summary", json={"targetId": target})
    assert moved.status_code == 202
    record = finished(http, moved.json()["jobId"])
    assert record["state"] == "succeeded" and record["entry"]["type"] == "branch_summary"
    missing = http.post(f"/v1/sessions/{name}/branch-summary", json={"targetId": "nope"})
    assert missing.status_code == 404 and missing.json()["code"] == "entry_not_found"
    bad = http.post(f"/v1/sessions/{name}/compact", json={"reason": "sometimes"})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_error"
    gone = http.post("/v1/sessions/nope/prune")
    assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"


def test_long_poll_times_out_with_the_running_record_then_cancel(
        http: httpx.Client, model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, hang())
    name = demo_session(http)
    job_id = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"}).json()["jobId"]
    started = time.monotonic()
    record = http.get(f"/v1/jobs/{job_id}", params={"wait": 1.0}).json()
    assert 0.9 <= time.monotonic() - started < 5
    assert record["state"] in ("queued", "running")
    cancel = http.post(f"/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 200 and cancel.json()["state"] in ("running", "cancelled")
    assert finished(http, job_id)["state"] == "cancelled"
    assert http.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
    missing = http.get(f"/v1/jobs/{name}:0123456789abcdef")
    assert missing.status_code == 404 and missing.json()["code"] == "job_not_found"
    assert http.get("/v1/jobs/nonsense").json()["code"] == "invalid_id"


def sse(http: httpx.Client, path: str, **params: Any) -> list[dict[str, str]]:
    """The frames of a stream that ends (follow=false)."""
    events, frame = [], {}
    with http.stream("GET", path, params=params) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if frame:
                    events.append(frame)
                frame = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                frame[field] = value
    return events


def test_events_are_sse_and_resume_after_last_event_id(http: httpx.Client) -> None:
    name = demo_session(http)
    job_id = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"}).json()["jobId"]
    finished(http, job_id)
    history = sse(http, f"/v1/sessions/{name}/events", follow="false")
    assert [e["event"] for e in history] == ["compaction_start", "session_compact",
                                             "compaction_end"]
    assert all(job_id in e["data"] for e in history)
    rest = sse(http, f"/v1/sessions/{name}/events", follow="false",
               since=history[0]["id"])
    assert [e["id"] for e in rest] == [e["id"] for e in history[1:]]
    with http.stream("GET", f"/v1/sessions/{name}/events", params={"follow": "false"},
                     headers={"Last-Event-ID": history[1]["id"]}) as response:
        assert history[2]["id"] in response.read().decode()
    everything = sse(http, "/v1/events", follow="false", since="start")
    assert [e["event"] for e in everything if job_id in e["data"]] == [
        e["event"] for e in history]  # copies: the global stream has ids of its own
    bad = http.get(f"/v1/sessions/{name}/events", params={"since": "yesterday"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"


def test_a_live_stream_sends_keepalives_then_the_jobs_events(http: httpx.Client) -> None:
    name = demo_session(http)
    lines: list[str] = []
    subscribed = threading.Event()

    def listen() -> None:
        with http.stream("GET", f"/v1/sessions/{name}/events") as response:
            for line in response.iter_lines():
                lines.append(line)
                subscribed.set()
                if line.startswith("event: compaction_end"):
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert subscribed.wait(10)
    wait_until(lambda: ": keepalive" in lines, 10, "a keepalive (every 0.3 s here)")
    http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"})
    listener.join(30)
    assert not listener.is_alive()
    assert lines.count(": keepalive") >= 1
    assert [x for x in lines if x.startswith("event: ")] == [
        "event: compaction_start", "event: session_compact", "event: compaction_end"]
