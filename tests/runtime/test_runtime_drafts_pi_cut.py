"""Issue 38 item 2 through drafts: a threshold compaction answered from a draft has pi's cut.

A draft planned with pi's settings (summaryFormat ``pi-*``) on a state S is applied by the
client only on S (docs/instant-compaction.md, "The validity rule"). One turn later the client
keeps it (``moved``) and the job that runs instead either commits it as it is, when the turn did
not move pi's cut, or extends it: the model is asked for the gap between the draft's cut and the
new one only (the draft's summary as the previous summary), and the entry keeps from the entry
pi's own preparation of the current state keeps from, with the same split turn (checked against
the real pi's ``prepareCompaction`` when pi is installed: skipped without it, failed when ``CI``
is set). A real worker (threads pool, in this process), a real Redis and a loopback model.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import runtime_settings

from api_client import AgentSettings, CompactionClient
from api_client.client.draft_apply import read_draft
from helpers.pi_cut import NODE, PI_PACKAGES, Cut, State, compactor_cut, pi_cuts
from helpers.waits import wait_until
from worker.compaction.summarize import SPLIT_TURN_SEPARATOR
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

WINDOW, RESERVE, KEEP = 32_000, 4_000, 3_000
VERSIONS = ("pi-1.6", "pi-0.73")


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()])  # the worker's defaults


@pytest.fixture
def fresh_model(model: ModelServer) -> ModelServer:
    model.release()
    model.latency_s = 0.0
    return model


def agent_of(version: str) -> AgentSettings:
    return AgentSettings(reserve_tokens=RESERVE, keep_recent_tokens=KEEP, tokenizer="estimate",
                         summary_format=version)  # type: ignore[arg-type]


def words(tag: str, chars: int) -> str:
    """Text of about ``chars`` characters that names its turn (``tag``) in every sentence."""
    sentence = f"[{tag}] the parser keeps the locale of each amount. "
    return (sentence * (chars // len(sentence) + 1))[:chars]


def turn(client: CompactionClient, sid: str, n: int, chars: int = 4_000) -> None:
    """One turn as pi appends it: the user's prompt, then the answer with its usage."""
    client.sessions.append(sid, {"role": "user", "content": [
        {"type": "text", "text": words(f"user {n}", chars)}], "timestamp": n})
    client.sessions.append(sid, {
        "role": "assistant", "content": [{"type": "text", "text": words(f"answer {n}", chars)}],
        "api": "openai-completions", "provider": "openai", "model": "loop", "stopReason": "stop",
        "usage": {"input": 2_000 * n, "output": 1_000, "cacheRead": 0, "cacheWrite": 0,
                  "totalTokens": 2_000 * n + 1_000}, "timestamp": n})


def session_of(client: CompactionClient, turns: int) -> str:
    sid = client.sessions.create()
    for n in range(1, turns + 1):
        turn(client, sid, n)
    return sid


def planned_draft(client: CompactionClient, sid: str, agent: AgentSettings) -> dict[str, Any]:
    spec = client.compact(sid, reason="speculative", context_window=WINDOW, agent=agent)
    assert spec.wait(30) is None
    draft = client.transport.run(read_draft(client.layout, sid))
    assert draft is not None and draft["jobId"] == spec.id
    return dict(draft)


def current_state(client: CompactionClient, sid: str) -> State:
    jsonl = client.sessions.export_jsonl(sid)
    return State(sid, jsonl, str(client.sessions.load(sid).leaf_id), "threshold")


def pis_cut(version: str, state: State) -> Cut | None:
    """pi's own preparation of ``state`` (None: pi is not installed here)."""
    if NODE.exists() and PI_PACKAGES[version].exists():
        return pi_cuts(version, [state], KEEP, RESERVE)[0]
    if os.environ.get("CI"):
        pytest.fail(f"pi {version} or Node 22 is not installed (CI must have them)")
    return None


def assert_pis_cut(entry: dict[str, Any], version: str, state: State) -> Cut:
    """The entry keeps from where the plan of the state does, splits the same turn, and so
    does pi's own preparation of that state."""
    want = compactor_cut(state, agent_of(version))
    assert want is not None
    assert entry["firstKeptEntryId"] == want.first_kept_entry_id
    assert (SPLIT_TURN_SEPARATOR in entry["summary"]) == want.is_split_turn
    theirs = pis_cut(version, state)
    if theirs is not None:
        assert (theirs.first_kept_entry_id, theirs.is_split_turn, theirs.summarize,
                theirs.prefix) == (want.first_kept_entry_id, want.is_split_turn,
                                   want.summarize, want.prefix)
    return want


@pytest.mark.parametrize("version", VERSIONS)
def test_a_draft_of_the_turn_before_is_extended_to_pis_cut(
        client: CompactionClient, fresh_model: ModelServer, version: str) -> None:
    agent = agent_of(version)
    sid = session_of(client, 8)
    draft = planned_draft(client, sid, agent)
    before = compactor_cut(current_state(client, sid), agent)
    assert before is not None and before.first_kept_entry_id == draft["firstKeptEntryId"]
    turn(client, sid, 9)  # one more turn: pi's cut moves past the draft's
    state = current_state(client, sid)
    asked = len(fresh_model.prompts)
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    assert not handle.from_draft  # planned on an earlier state: kept for the job (moved)
    entry = handle.wait(30)
    assert isinstance(entry, dict)
    record = handle.record()
    assert record.draft_discarded == "moved"
    assert record.result and record.result["extendedDraft"] == draft["jobId"]
    want = assert_pis_cut(entry, version, state)
    assert want.first_kept_entry_id != draft["firstKeptEntryId"]
    # The model was asked for the gap only: the turns the draft summarised appear in no prompt
    # of the job (its summary is the previous summary), the gap's turns do.
    prompts = fresh_model.prompts[asked:]
    assert prompts and any(draft["summary"].split(SPLIT_TURN_SEPARATOR)[0] in p for p in prompts)
    summarised_by_draft = [f"[user {n}]" for n in range(1, 8)]
    assert not any(tag in p for p in prompts for tag in summarised_by_draft), prompts
    assert any("[answer 7]" in p or "[user 8]" in p for p in prompts)
    assert record.usage is not None and record.draft_usage is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_draft_whose_cut_did_not_move_is_committed_as_it_is(
        client: CompactionClient, fresh_model: ModelServer, version: str) -> None:
    agent = agent_of(version)
    sid = session_of(client, 8)
    draft = planned_draft(client, sid, agent)
    client.sessions.append(sid, {"role": "user", "content": [{"type": "text", "text": "ok"}],
                                 "timestamp": 99})  # a few tokens: pi's cut stays
    state = current_state(client, sid)
    asked = fresh_model.requests
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    assert not handle.from_draft
    entry = handle.wait(30)
    assert isinstance(entry, dict)
    record = handle.record()
    assert record.result and record.result["exactDraft"] == draft["jobId"]
    assert entry["summary"] == draft["summary"] and fresh_model.requests == asked
    assert_pis_cut(entry, version, state)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_draft_of_the_same_state_is_applied_by_the_client(
        client: CompactionClient, fresh_model: ModelServer, version: str) -> None:
    agent = agent_of(version)
    sid = session_of(client, 9)
    draft = planned_draft(client, sid, agent)
    state = current_state(client, sid)
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    assert handle.from_draft
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["summary"] == draft["summary"]
    assert_pis_cut(entry, version, state)


def test_per_turn_drafts_each_summarise_the_gap_only(
        client: CompactionClient, fresh_model: ModelServer) -> None:
    """The extension asks a draft after every turn in the band: each one extends the previous
    one (or carries it when the cut did not move). What that costs a turn, in model tokens."""
    agent = agent_of("pi-1.6")
    sid = session_of(client, 8)
    first = planned_draft(client, sid, agent)
    costs = []
    for n in range(9, 13):
        turn(client, sid, n)
        before = dict(first["usage"])
        first = planned_draft(client, sid, agent)
        spent = {k: first["usage"][k] - before.get(k, 0) for k in ("input", "output")}
        costs.append(spent)
        want = compactor_cut(current_state(client, sid), agent)
        assert want is not None and first["firstKeptEntryId"] == want.first_kept_entry_id
    print(f"model tokens a turn (4 000-character prompt and answer): {costs}")
    # a turn's gap (about two messages of ~1 000 tokens each) and the previous summary, never
    # the whole history again (eight turns and more: over 16 000 tokens)
    assert all(c["input"] < 6_000 for c in costs), costs


def draft_in_flight(client: CompactionClient, model: ModelServer, sid: str,
                    agent: AgentSettings) -> Any:
    """A speculative job whose first model call the loopback model holds."""
    model.stall_next(1)
    spec = client.compact(sid, reason="speculative", context_window=WINDOW, agent=agent)
    assert model.in_flight.wait(30), "the draft job never called the model"
    return spec


def test_a_draft_in_flight_of_the_same_state_is_joined(
        client: CompactionClient, fresh_model: ModelServer) -> None:
    agent = agent_of("pi-1.6")
    sid = session_of(client, 9)
    state = current_state(client, sid)
    spec = draft_in_flight(client, fresh_model, sid, agent)
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    assert not handle.from_draft  # nothing stored yet
    # Released before the job started, the draft would be stored first and taken as exact.
    wait_until(lambda: handle.record().state.value == "running", 30, "the job to start")
    fresh_model.release()
    entry = handle.wait(30)
    assert isinstance(entry, dict)
    record = handle.record()
    assert record.result and record.result.get("joinedDraft") == spec.id, sorted(record.result)
    assert record.model is None  # the draft's summary, no call of its own
    assert_pis_cut(entry, "pi-1.6", state)


def test_a_draft_in_flight_of_an_earlier_state_is_not_waited_for(
        client: CompactionClient, fresh_model: ModelServer) -> None:
    """Waiting for it would cost the wait and the gap's summary: the job plans at once."""
    agent = agent_of("pi-1.6")
    sid = session_of(client, 8)
    spec = draft_in_flight(client, fresh_model, sid, agent)
    turn(client, sid, 9)  # pi's cut moves: the draft in flight will not be exact
    state = current_state(client, sid)
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    try:
        entry = handle.wait(30)  # while the draft's call is still held
        assert spec.record().state.value == "running"  # its draft still computing
    finally:
        fresh_model.release()
    assert isinstance(entry, dict)
    record = handle.record()
    assert record.result and "joinedDraft" not in record.result
    assert_pis_cut(entry, "pi-1.6", state)
    spec.wait(30)


def test_a_draft_whose_cut_did_not_move_is_carried_to_the_next_state(
        client: CompactionClient, fresh_model: ModelServer) -> None:
    """The next turn's draft, pi's cut unmoved: stored again for the new state without a model
    call, then applied by the client on that state."""
    agent = agent_of("pi-1.6")
    sid = session_of(client, 8)
    first = planned_draft(client, sid, agent)
    client.sessions.append(sid, {"role": "user", "content": [{"type": "text", "text": "ok"}],
                                 "timestamp": 99})
    state = current_state(client, sid)
    asked = fresh_model.requests
    spec = client.compact(sid, reason="speculative", context_window=WINDOW, agent=agent)
    assert spec.wait(30) is None
    assert (spec.record().result or {}).get("carriedDraft") == first["jobId"]
    carried = client.transport.run(read_draft(client.layout, sid))
    assert carried is not None and carried["snapshotLeafId"] == state.leaf_id
    assert carried["summary"] == first["summary"] and fresh_model.requests == asked
    handle = client.compact(sid, reason="threshold", context_window=WINDOW, agent=agent)
    assert handle.from_draft  # the state it was planned on (carried to)
    entry = handle.wait(30)
    assert isinstance(entry, dict)
    assert_pis_cut(entry, "pi-1.6", state)
