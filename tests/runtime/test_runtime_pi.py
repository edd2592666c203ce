"""The pi extension (integrations/pi) end to end, with the real pi.

pi 1.6 from npm (``make pi``) runs in RPC mode with the extension against a loopback
OpenAI-compatible model (streaming, usage chunk, scripted latency), ``compactor serve`` in a
child process and a real worker at its default settings; pi has non-default compaction settings
(window 32 000, reserve 4 000, keep 3 000) and names Compactor in its settings.json. One
conversation crosses the threshold (the extension had a draft computed in the band below it),
is compacted by hand with instructions, overflows, and navigates the tree with a summary: each
time pi's session file gets the entry Compactor wrote, cut where pi's own preparation cuts (a
probe extension records it), and the request pi sends next carries it. Then Compactor stops:
pi falls back to its built-in compaction (its UI is told once) and, with Compactor back, the
mirror catches up. With ``compactor serve`` up and no worker alive, pi's built-in runs at once.

Skipped only when pi is missing and npm's registry is unreachable (failing when ``CI`` is set).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RedisProcess
from pydantic import SecretStr
from recovery.recovery_support import WorkerProcess, model_env, worker_env
from runtime.runtime_support import entries_of_type, runtime_settings, session_events

from api_client import CompactionClient
from helpers.ci import agent_installed
from helpers.pi_agent import (
    EXTENSION,
    NAVIGATE,
    PROBE,
    PiInstall,
    PiRpc,
    ensure_pi,
    find_pi_073,
    read_jsonl,
    running_pi,
    write_agent_dir,
)
from helpers.pi_model import StreamingModel
from helpers.serve_process import TOKEN, ServeProcess
from worker.celery_app import CompactorCelery
from worker.llm import ModelCandidate
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

# pi's threshold is 32 000 - 4 000 = 28 000 tokens, its band (where the extension asks for a
# draft) starts 8 192 below; a turn adds ~2 000 (a 4 000-character prompt and answer), so the
# kept 3 000 cut into a turn (pi's split turn).
WINDOW, RESERVE, KEEP = 32_000, 4_000, 3_000
TURN = 2_100
PROMPT = "Look at the importer again and tell me what the parser does. " * 66
INSTRUCTIONS = "Keep the parser decisions"


@pytest.fixture(scope="module")
def pi_install() -> PiInstall:
    return agent_installed(ensure_pi, "pi")


@pytest.fixture(scope="module")
def llm() -> Iterator[StreamingModel]:
    server = StreamingModel(latency_s=0.05, reply_chars=4000)
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, llm: StreamingModel) -> WorkerSettings:
    candidate = ModelCandidate(provider="openai", model="loop", base_url=llm.base_url,
                               api_key=SecretStr("loop"), context_window=WINDOW)
    return runtime_settings(module_redis, models=[candidate])  # the worker's defaults


@pytest.fixture(scope="module")
def serve(module_redis: str, app: CompactorCelery,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(module_redis, tmp_path_factory.mktemp("serve") / "serve.log")
    server.start()
    yield server
    server.stop()


def start_pi(install: PiInstall, llm: StreamingModel, url: str, tmp_path: Path) -> PiRpc:
    """pi with its settings, Compactor named in its settings.json (as a pi user does), and the
    probe recording pi's own preparation of each compaction."""
    compactor = {"url": url, "token": TOKEN, "timeoutS": 30}
    home = write_agent_dir(tmp_path / "agent", llm.base_url, context_window=WINDOW,
                           reserve_tokens=RESERVE, keep_recent_tokens=KEEP,
                           settings={"compactor": compactor})
    return PiRpc(install, home, tmp_path / "work", extensions=(PROBE, EXTENSION, NAVIGATE),
                 env={"PI_PROBE_FILE": str(tmp_path / "probe.jsonl")})


@pytest.fixture
def pi(pi_install: PiInstall, llm: StreamingModel, serve: ServeProcess,
       tmp_path: Path) -> Iterator[PiRpc]:
    agent = start_pi(pi_install, llm, serve.url, tmp_path)
    yield agent
    agent.close()


def preparations(tmp_path: Path) -> list[dict[str, Any]]:
    """pi's own preparation of each compaction so far (the probe's lines)."""
    probe = tmp_path / "probe.jsonl"
    return read_jsonl(probe) if probe.exists() else []


SPLIT_TURN = "**Turn Context (split turn):**"  # the section a split turn's summary ends with


def cut_differs(entry: dict[str, Any], tmp_path: Path) -> list[str]:
    """Where Compactor's compaction did not cut where pi's own preparation for that compaction
    did: the first kept entry (so the summarised span) and the split-turn flag (its summary has
    the turn's section). A test collects these and asserts at its end, so one run shows every
    difference."""
    prepared = preparations(tmp_path)[-1]
    split = SPLIT_TURN in entry["summary"]
    if (entry["firstKeptEntryId"], split) == (prepared["firstKeptEntryId"],
                                              prepared["isSplitTurn"]):
        return []
    return [f"{entry['id']}: Compactor kept from {entry['firstKeptEntryId']} (split turn: "
            f"{split}), pi's preparation from {prepared['firstKeptEntryId']} (split turn: "
            f"{prepared['isSplitTurn']})"]


def used_draft(client: CompactionClient, entry: dict[str, Any]) -> str:
    """How the compaction used the draft asked for in the band (docs/instant-compaction.md,
    "The validity rule"): applied by the client (the state it was planned on), committed as it
    is or extended by the job (its summary the previous summary of an update over the gap)."""
    origin = entry["details"]["compactor"]
    if origin["fromDraft"]:
        return "applied"
    result = client.job(origin["jobId"]).record().result or {}
    used = [key for key in ("joinedDraft", "exactDraft", "extendedDraft") if result.get(key)]
    assert used, result
    return used[0]


def draft_costs(client: CompactionClient, sid: str) -> list[tuple[int, int, str]]:
    """(input, output, how) model tokens of each draft the extension asked for so far, in order:
    ``extended`` (the previous draft's summary and the gap), ``carried`` (the cut did not move:
    no call) or ``whole`` (planned on the path alone)."""
    out: list[tuple[int, int, str]] = []
    for event in session_events(client, sid):
        if event.type.value != "compaction_end" or event.reason is None or (
                event.reason.value != "speculative"):
            continue
        record = client.job(event.job_id).record()
        result = record.result or {}
        how = ("carried" if result.get("carriedDraft") else
               "extended" if result.get("extendedDraft") else "whole")
        usage = record.usage
        out.append((usage.input if usage else 0, usage.output if usage else 0, how))
    return out


def entries(pi: PiRpc, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(pi.session_file()) if e.get("type") == kind]


def next_request_text(pi: PiRpc, llm: StreamingModel) -> str:
    """What pi sends the model for one more prompt."""
    before = len(llm.of("pi"))
    pi.prompt("And now? " + PROMPT)
    return llm.of("pi")[before].text()


def written_by_compactor(client: CompactionClient, sid: str, entry: dict[str, Any]) -> bool:
    """pi's entry holds the summary of the one Compactor wrote in its copy of the session (the
    mirror then added pi's own beside it)."""
    theirs = entries_of_type(client, sid, entry["type"])
    ours = entry["details"]["compactor"]["entryId"]
    return any(e["id"] == ours and e["summary"] == entry["summary"] for e in theirs)


def wait_until(check: Any, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)


def test_pi_compacts_with_compactor(pi: PiRpc, llm: StreamingModel, client: CompactionClient,
                                    serve: ServeProcess, tmp_path: Path) -> None:
    sid = pi.state()["sessionId"]
    draft = client.layout.session(sid).draft
    differences: list[str] = []
    # -- a conversation crossing the threshold, from a draft computed in the band before it
    for _ in range(30):
        last = llm.of("pi")[-1] if llm.of("pi") else None
        if last and last.prompt_tokens + last.completion_tokens + TURN > WINDOW - RESERVE:
            # The next turn crosses the threshold: the draft the extension asked for in the
            # band must be done (the turns before went on while it was asked and computed).
            wait_until(lambda: client.redis.exists(draft), what="a draft")
        mark = len(pi.records)
        pi.prompt(PROMPT)
        if pi.events("compaction_end", mark):
            break
    end = pi.events("compaction_end")
    assert [e["reason"] for e in end] == ["threshold"] and end[0]["result"], end
    first = entries(pi, "compaction")[-1]
    assert "Compactor summary" in first["summary"] and first["fromHook"] is True
    assert written_by_compactor(client, sid, first)
    print(f"threshold compaction: the draft {used_draft(client, first)}; drafts in the band "
          f"(input, output model tokens): {draft_costs(client, sid)}")
    differences += cut_differs(first, tmp_path)  # pi's cut, through the draft
    assert end[0]["result"]["estimatedTokensAfter"] > 0
    assert "Compactor summary" in next_request_text(pi, llm)
    assert not llm.of("pi-summary")  # pi's built-in never ran

    # -- by hand, with instructions: a job, which gets them
    asked = len(llm.of("compactor"))
    response = pi.compact(INSTRUCTIONS)
    assert response["success"], response
    manual = entries(pi, "compaction")[-1]
    assert manual["id"] != first["id"] and "Compactor summary" in manual["summary"]
    assert manual["details"]["compactor"]["fromDraft"] is False
    assert any(INSTRUCTIONS in c.text() for c in llm.of("compactor")[asked:])
    differences += cut_differs(manual, tmp_path)
    assert manual["usage"]["input"] > 0 and manual["usage"]["output"] > 0, manual
    # pi's effective settings went with the request (the worker planned with them)
    record = client.job(manual["details"]["compactor"]["jobId"]).record()
    assert record.agent is not None and record.agent.to_wire() == {
        "reserveTokens": RESERVE, "keepRecentTokens": KEEP, "tokenizer": "estimate",
        "summaryFormat": "pi-1.6", "summaryMaxTokens": 4000, "turnPrefixMaxTokens": 4000,
        "branchReserveTokens": 16_384}
    assert "Compactor summary" in next_request_text(pi, llm)

    # -- the model answers that the context overflows: pi compacts and tries again (after
    # enough turns that pi's own plan finds more than its kept tail to summarise)
    for _ in range(3):
        pi.prompt(PROMPT)
    llm.overflow_next(1)
    mark, sent = len(pi.records), len(llm.of("pi"))
    pi.prompt(PROMPT)
    ended = pi.events("compaction_end", mark)
    assert [e["reason"] for e in ended] == ["overflow"], (
        " ".join(str(r.get("type")) for r in pi.records[mark:]
                 if r.get("type") != "message_update"),
        [c.answered for c in llm.of("pi")[sent:]], pi.log())
    overflow = entries(pi, "compaction")[-1]
    assert overflow["id"] != manual["id"] and "Compactor summary" in overflow["summary"]
    differences += cut_differs(overflow, tmp_path)
    retried = llm.of("pi")[sent:]
    assert [c.answered for c in retried] == ["overflow", "ok"]
    assert "Compactor summary" in retried[-1].text()

    # -- back up the tree, summarising the branch left behind
    path = [e for e in read_jsonl(pi.session_file())
            if e.get("type") == "message" and e["message"]["role"] == "assistant"]
    target = path[-2]["id"]
    pi.prompt(f"/navigate {target}")
    wait_until(lambda: entries(pi, "branch_summary"), what="a branch summary")
    summary = entries(pi, "branch_summary")[-1]
    assert summary["parentId"] == target and summary["fromHook"] is True
    assert "Compactor summary" in summary["summary"]
    assert written_by_compactor(client, sid, summary)
    branch_job = client.job(summary["details"]["compactor"]["jobId"]).record()
    assert branch_job.agent is not None and branch_job.agent.branch_reserve_tokens == 16_384
    assert "Compactor summary" in next_request_text(pi, llm)
    assert not llm.of("pi-summary")
    assert not pi.notices() and "[compactor]" not in pi.log(), (pi.notices(), pi.log())

    # -- Compactor stops: pi falls back to its built-in compaction, and says so once
    serve.stop()
    mark = len(pi.records)
    for _ in range(30):
        pi.prompt(PROMPT)
        if pi.events("compaction_end", mark):
            break
    assert [e["reason"] for e in pi.events("compaction_end", mark)] == ["threshold"]
    own = entries(pi, "compaction")[-1]
    assert "pi's own summary" in own["summary"] and not own.get("fromHook")
    assert sum("is unreachable" in n for n in pi.notices()) == 1, pi.notices()

    # -- Compactor is back: the mirror catches up with what pi appended meanwhile
    serve.start()
    pi.prompt(PROMPT)
    ids = {e["id"] for e in read_jsonl(pi.session_file())[1:]}
    leaf = read_jsonl(pi.session_file())[-1]["id"]

    def mirrored() -> bool:
        snapshot = client.sessions.load(sid)
        stored = {e.id for e in snapshot.session.entries}
        return ids <= stored and snapshot.leaf_id == leaf

    wait_until(mirrored, what="the mirror catching up")
    assert not differences, differences


def test_no_worker_pi_compacts_by_itself_at_once(pi_install: PiInstall, llm: StreamingModel,
                                                 own_redis: RedisProcess,
                                                 tmp_path: Path) -> None:
    """``compactor serve`` up, no worker alive: the extension asks GET /v1/workers before the
    compaction and lets pi's built-in run at once, not after its timeout."""
    serve = ServeProcess(own_redis.url, tmp_path / "serve.log")
    serve.start()
    agent = start_pi(pi_install, llm, serve.url, tmp_path)
    try:
        mark = len(agent.records)
        for _ in range(30):
            agent.prompt(PROMPT)
            if agent.events("compaction_end", mark):
                break
        start = agent.events("compaction_start", mark)[0]
        end = agent.events("compaction_end", mark)[0]
        assert end["reason"] == "threshold" and end["result"], end
        assert "pi's own summary" in entries(agent, "compaction")[-1]["summary"]
        assert any("no Compactor worker is alive" in n for n in agent.notices()), agent.notices()
        # far below the extension's timeout (30 s), which is what it waited before
        assert end["at"] - start["at"] < 15, end["at"] - start["at"]
    finally:
        agent.close()
        serve.stop()


def test_pi_073_compacts_with_compactor(llm: StreamingModel, client: CompactionClient,
                                        serve: ServeProcess, tmp_path: Path) -> None:
    """pi 0.73.1 (beside 1.6 in node_modules): the same extension sends 0.73's summary format
    and max_tokens, its threshold compaction and a manual one are Compactor's, cut where pi's
    own preparation cuts (through a draft too: the same first kept entry and split turn)."""
    install = find_pi_073()
    if install is None:
        pytest.fail("pi 0.73.1 is not installed (make pi installs it as pi-073)")
    agent = start_pi(install, llm, serve.url, tmp_path)
    try:
        mark = len(agent.records)
        for _ in range(30):
            agent.prompt(PROMPT)
            last = llm.of("pi")[-1]
            if last.prompt_tokens + last.completion_tokens > WINDOW - RESERVE:
                # 0.73 compacts after agent_end: wait for it rather than race the next prompt
                agent.wait_for(lambda r: r.get("type") == "compaction_end", mark)
            if agent.events("compaction_end", mark):
                break
        end = agent.events("compaction_end", mark)
        assert end and end[0]["result"], end
        first = entries(agent, "compaction")[-1]
        assert "Compactor summary" in first["summary"] and first["fromHook"] is True
        differences = cut_differs(first, tmp_path)  # pi's cut, with or without a draft
        agent.prompt(PROMPT)  # a turn after it: pi has something to compact again
        response = agent.compact(INSTRUCTIONS)
        assert response["success"], response
        manual = entries(agent, "compaction")[-1]
        assert manual["id"] != first["id"] and "Compactor summary" in manual["summary"]
        differences += cut_differs(manual, tmp_path)
        record = client.job(manual["details"]["compactor"]["jobId"]).record()
        assert record.agent is not None and record.agent.to_wire() == {
            "reserveTokens": RESERVE, "keepRecentTokens": KEEP, "tokenizer": "estimate",
            "summaryFormat": "pi-0.73", "summaryMaxTokens": 3200, "turnPrefixMaxTokens": 2000,
            "branchReserveTokens": 16_384}
        assert not llm.of("pi-summary") or all(
            "Compactor summary" in e["summary"] for e in entries(agent, "compaction"))
        assert not differences, differences
    finally:
        agent.close()


def test_compaction_off_uploads_nothing(pi_install: PiInstall, llm: StreamingModel,
                                        client: CompactionClient, serve: ServeProcess,
                                        tmp_path: Path) -> None:
    """pi's ``compaction.enabled`` false: the extension says so once and stays out of the way:
    no session in Compactor, pi's own manual compaction."""
    compactor = {"url": serve.url, "token": TOKEN}
    home = write_agent_dir(tmp_path / "agent", llm.base_url, context_window=WINDOW,
                           reserve_tokens=RESERVE, keep_recent_tokens=KEEP,
                           settings={"compactor": compactor,
                                     "compaction": {"enabled": False, "reserveTokens": RESERVE,
                                                    "keepRecentTokens": KEEP}})
    with running_pi(pi_install, home, tmp_path / "work", extensions=(EXTENSION,)) as agent:
        sid = agent.state()["sessionId"]
        for _ in range(3):
            agent.prompt(PROMPT)
        response = agent.compact()
        assert response["success"], response
        assert "pi's own summary" in entries(agent, "compaction")[-1]["summary"]
        assert any("compaction is off" in n for n in agent.notices()), agent.notices()
        # the decision was made at session start, before the first entry: nothing went out
        assert not client.sessions.exists(sid)


def test_worker_killed_mid_compaction_pi_compacts_by_itself(
        pi_install: PiInstall, own_redis: RedisProcess, tmp_path: Path) -> None:
    """The only worker dies while pi waits for its compaction: the extension sees the job's
    ``workerLost`` (or no worker alive) and lets pi's built-in run, long before its timeout."""
    model = StreamingModel(latency_s=0.5, reply_chars=4000)
    serve = ServeProcess(own_redis.url, tmp_path / "serve.log")
    worker = WorkerProcess(worker_env(own_redis.url, COMPACTOR_MODELS=model_env(model.base_url)),
                           "w", tmp_path)
    killed: list[float] = []

    def kill_once_it_summarises() -> None:
        while not model.of("compactor") and worker.alive():
            time.sleep(0.02)
        os.killpg(worker.pid, signal.SIGKILL)
        killed.append(time.monotonic())

    try:
        serve.start()
        worker.wait_ready()
        home = write_agent_dir(tmp_path / "agent", model.base_url, context_window=WINDOW,
                               reserve_tokens=RESERVE, keep_recent_tokens=KEEP,
                               settings={"compactor": {"url": serve.url, "token": TOKEN,
                                                       "timeoutS": 60, "precompute": False}})
        killer = threading.Thread(target=kill_once_it_summarises, daemon=True)
        killer.start()
        with running_pi(pi_install, home, tmp_path / "work", extensions=(EXTENSION,)) as agent:
            for _ in range(30):
                agent.prompt(PROMPT, timeout=90)
                if agent.events("compaction_end"):
                    break
            end = agent.events("compaction_end")[0]
            assert end["reason"] == "threshold" and end["result"], end
            assert "pi's own summary" in entries(agent, "compaction")[-1]["summary"]
            assert any("gone" in n or "no Compactor worker" in n for n in agent.notices()), (
                agent.notices())
            # the heartbeat's few seconds and pi's own summary, far below the timeout (60 s)
            assert killed and end["at"] - killed[0] < 20, end["at"] - killed[0]
    finally:
        worker.kill()
        serve.stop()
        model.close()
