"""The pi extension (integrations/pi) end to end, with the real pi.

pi 1.6 from npm (``make pi``) runs in RPC mode with the extension against a loopback
OpenAI-compatible model (streaming, usage chunk, scripted latency), ``compactor serve`` in a
child process and a real worker. One conversation crosses the threshold (the extension had a
draft computed in the band below it), is compacted by hand with instructions, overflows, and
navigates the tree with a summary: each time pi's session file gets the entry Compactor wrote,
and the request pi sends next carries it. Then Compactor stops: pi falls back to its built-in
compaction (the log says so once) and, with Compactor back, the mirror catches up.

Skipped only when pi is missing and npm's registry is unreachable (failing when ``CI`` is set).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from runtime.runtime_support import entries_of_type, runtime_settings

from api_client import CompactionClient
from helpers.pi_agent import (
    EXTENSION,
    NAVIGATE,
    PiInstall,
    PiRpc,
    PiUnavailable,
    ensure_pi,
    read_jsonl,
    write_agent_dir,
)
from helpers.pi_model import StreamingModel
from helpers.serve_process import TOKEN, ServeProcess
from worker.app import CompactorCelery
from worker.llm import ModelCandidate
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

# pi's threshold is 32 000 - 8 000 = 24 000 tokens, its band (where the extension asks for a
# draft) starts 8 192 below; a turn adds ~2 000 (a 4 000-character prompt and answer).
WINDOW, RESERVE, KEEP = 32_000, 8_000, 6_000
TURN = 2_100
PROMPT = "Look at the importer again and tell me what the parser does. " * 66
INSTRUCTIONS = "Keep the parser decisions"


@pytest.fixture(scope="module")
def pi_install() -> PiInstall:
    try:
        return ensure_pi()
    except PiUnavailable as err:
        if err.npm_reachable or os.environ.get("CI"):
            pytest.fail(f"pi is not installed: {err}")
        pytest.skip(f"pi is not installed and npm's registry is unreachable ({err})")


@pytest.fixture(scope="module")
def llm() -> Iterator[StreamingModel]:
    server = StreamingModel(latency_s=0.05, reply_chars=4000)
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, llm: StreamingModel) -> WorkerSettings:
    candidate = ModelCandidate(provider="openai", model="loop", base_url=llm.base_url,
                               api_key=SecretStr("loop"), context_window=WINDOW)
    return runtime_settings(module_redis, models=[candidate], keep_recent_tokens=KEEP,
                            reserve_tokens=RESERVE, context_window=WINDOW)


@pytest.fixture(scope="module")
def serve(module_redis: str, app: CompactorCelery,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(module_redis, tmp_path_factory.mktemp("serve") / "serve.log",
                          COMPACTOR_KEEP_RECENT_TOKENS=str(KEEP),
                          COMPACTOR_RESERVE_TOKENS=str(RESERVE))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pi(pi_install: PiInstall, llm: StreamingModel, serve: ServeProcess,
       tmp_path: Path) -> Iterator[PiRpc]:
    home = write_agent_dir(tmp_path / "agent", llm.base_url, context_window=WINDOW,
                           reserve_tokens=RESERVE, keep_recent_tokens=KEEP)
    agent = PiRpc(pi_install, home, tmp_path / "work", extensions=(EXTENSION, NAVIGATE),
                  env={"COMPACTOR_URL": serve.url, "COMPACTOR_TOKEN": TOKEN,
                       "COMPACTOR_PI_TIMEOUT_S": "30"})
    yield agent
    agent.close()


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
                                    serve: ServeProcess) -> None:
    sid = pi.state()["sessionId"]
    draft = client.layout.session(sid).draft
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
    assert first["details"]["compactor"]["fromDraft"] is True
    assert written_by_compactor(client, sid, first)
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
    assert "Compactor summary" in next_request_text(pi, llm)
    assert not llm.of("pi-summary")
    assert "[compactor]" not in pi.log(), pi.log()

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
    assert pi.log().count("is unreachable") == 1, pi.log()

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
