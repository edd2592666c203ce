"""docs/compaction.md "Tool pairs": every context built after a compaction keeps each tool result
after its call."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from api_client.contract.session import Entry, SessionTree, parse_entry
from api_client.contract.session.context import (
    build_session_context,
    last_compaction_index,
)
from helpers.sessions import TS, assistant, chain, chars, user
from worker.compaction.cutpoint import find_cut_point
from worker.compaction.prepare import CompactionSettings, prepare_compaction
from worker.compaction.toolpairs import orphaned_tool_results, safe_first_kept_id
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


def call(*ids: str, tool: str = "bash") -> dict[str, Any]:
    message = assistant(tools=[(tool, {"command": f"run {i}"}) for i in ids])
    for block, call_id in zip(message["content"], ids, strict=True):
        block["id"] = call_id
    return message


def result(call_id: str, size: int = 40) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "bash",
            "content": [{"type": "text", "text": chars(size)}], "isError": False, "timestamp": 1}


def comp(first_kept: str) -> dict[str, Any]:
    return {"type": "compaction", "summary": "S", "firstKeptEntryId": first_kept, "tokensBefore": 1}


def roles_after_compaction(path: list[Entry], first_kept: str) -> list[str]:
    new = parse_entry({"type": "compaction", "id": "new", "parentId": path[-1].id, "timestamp": TS,
                       "summary": "S2", "firstKeptEntryId": first_kept, "tokensBefore": 1})
    context = build_session_context(SessionTree([*path, new]), "new")
    return [str(m.message["role"]) for m in context.messages]


@pytest.mark.parametrize(
    ("messages", "orphans"),
    [
        ([call("a"), result("a")], []),
        ([result("a"), call("a")], [0]),
        ([call("a", "b"), result("b"), result("a")], []),
        ([call("a"), result("b")], [1]),
        ([{"role": "toolResult", "content": "no id"}], [0]),  # no id: needs some earlier call
        ([call("a"), {"role": "toolResult", "content": "no id"}], []),
        ([user("hi"), result("a"), user("x"), result("a")], [1, 3]),
    ],
)
def test_orphaned_tool_results(messages: list[dict[str, Any]], orphans: list[int]) -> None:
    assert orphaned_tool_results(messages) == orphans


def test_reproduction_compaction_committed_while_the_tool_ran() -> None:
    # user, assistant(toolCall), compaction (committed while the tool ran), toolResult(large)
    path = chain(user(chars(400)), assistant(chars(400)), user("run the tests"), call("t1"),
                 comp("e2"), result("t1", 200_000))
    prep = prepare_compaction(path, CompactionSettings(), EST)
    assert prep is not None
    # The reference keeps from the tool result: [compactionSummary, toolResult] (a permanent 400).
    assert roles_after_compaction(path, "e5") == ["compactionSummary", "toolResult"]
    assert (prep.first_kept_entry_id, prep.is_split_turn, prep.turn_prefix_entry_ids) == (
        "e3", True, ("e2",))
    assert prep.kept_entry_ids == ("e3", "e5") and prep.summarize_entry_ids == ()
    assert roles_after_compaction(path, prep.first_kept_entry_id) == [
        "compactionSummary", "assistant", "toolResult"]


def test_parallel_calls_with_results_before_and_after_the_commit() -> None:
    path = chain(user("go"), call("a", "b"), result("a"), comp("e0"), result("b", 90_000))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=10), EST)
    assert prep is not None and prep.first_kept_entry_id == "e1"
    assert roles_after_compaction(path, "e1") == [
        "compactionSummary", "assistant", "toolResult", "toolResult"]


@pytest.mark.parametrize(
    "items",
    [
        [result("a")],  # nothing before the tool result to keep with it
        [user("x"), call("a"), comp("e9"), result("a")],  # previous kept range not on the path
    ],
)
def test_no_safe_cut_means_nothing_to_compact(items: list[dict[str, Any]]) -> None:
    assert prepare_compaction(chain(*items), CompactionSettings(), EST) is None


def test_result_in_the_middle_whose_call_precedes_the_cut_moves_the_cut_back() -> None:
    # A bash execution (the user ran a command) arrives between a call and its result.
    bash = {"role": "bashExecution", "command": "ls", "output": chars(4000), "exitCode": 0}
    path = chain(user(chars(4000)), call("a"), bash, result("a", 40), assistant("done"))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=900), EST)
    assert prep is not None and prep.first_kept_entry_id == "e1"


def test_hook_first_kept_id_is_moved_to_the_call() -> None:
    path = chain(user("go"), call("a"), comp("e0"), result("a"))
    assert safe_first_kept_id(path, "e3") == "e1"
    assert safe_first_kept_id(path, "e0") == "e0"
    assert safe_first_kept_id(path, "nowhere") == "nowhere"


NO_ID = {"role": "toolResult", "toolName": "bash", "content": "no id", "timestamp": 1}
BIG = CompactionSettings(keep_recent_tokens=110)


@pytest.mark.parametrize(
    ("items", "settings", "first_kept", "summarized"),
    [
        # (a) the session fits the keep budget: tool results no call on the path ever made stay
        # kept and the plan is the plain cut's, with nothing to summarize.
        ([user("go"), result("zz"), user("more"), call("a"), result("a"), result("yy"),
          assistant("done")], CompactionSettings(), "e0", ()),
        ([user("go"), call("a"), result("b"), result("a"), assistant("done")],
         CompactionSettings(), "e0", ()),
        ([user("go"), NO_ID, assistant("done")], CompactionSettings(), "e0", ()),
        ([result("zz"), result("yy"), user("go"), call("a"), result("a"), result("xx"),
          assistant("done")], CompactionSettings(), "e2", ("e0", "e1")),  # the first cut point
        ([user("go"), assistant("ok"), comp("e0"), user("more"), result("zz"), assistant("x")],
         CompactionSettings(), "e3", ("e0", "e1")),  # Q5 only
        # (c) a session that needs compacting: such results do not move the cut either.
        ([user(chars(4000)), assistant(chars(4000)), user(chars(200)), result("zz", 200),
          assistant(chars(200))], BIG, "e2", ("e0", "e1")),
        ([user(chars(4000)), assistant(chars(4000)), user(chars(200)), call("a"),
          result("b", 40), result("a", 40), assistant(chars(200))], BIG, "e2", ("e0", "e1")),
    ],
)
def test_results_no_call_made_never_move_the_cut(
    items: list[dict[str, Any]], settings: CompactionSettings, first_kept: str,
    summarized: tuple[str, ...],
) -> None:
    path = chain(*items)
    prep = prepare_compaction(path, settings, EST)
    assert prep is not None
    assert (prep.first_kept_entry_id, prep.summarize_entry_ids) == (first_kept, summarized)
    start = last_compaction_index(path) + 1
    cut = find_cut_point(path, start, len(path), settings.keep_recent_tokens, EST)
    assert prep.first_kept_entry_index == cut.first_kept_entry_index  # no Q22 repair


@pytest.mark.parametrize(
    ("items", "first_kept"),
    [
        # (b) a result whose call lies before the cut still moves it back to the call, next to
        # results no call made (which stay where they are).
        ([user("go"), call("a"), comp("e0"), result("a"), result("zz")], "e1"),
        ([user("go"), call("a"), comp("e0"), result("zz"), result("a")], "e1"),
        ([user("go"), result("zz"), call("a"), comp("e0"), NO_ID, result("a")], "e2"),
        ([user(chars(400)), result("zz"), assistant(chars(400)), user("run the tests"),
          call("t1"), comp("e3"), result("t1", 200_000)], "e4"),
    ],
)
def test_results_whose_call_precedes_the_cut_still_move_it(
    items: list[dict[str, Any]], first_kept: str
) -> None:
    path = chain(*items)
    prep = prepare_compaction(path, CompactionSettings(), EST)
    assert prep is not None and prep.first_kept_entry_id == first_kept
    context = roles_after_compaction(path, first_kept)
    assert context[:2] == ["compactionSummary", "assistant"]


def test_hook_first_kept_id_ignores_results_no_call_made() -> None:
    path = chain(user("go"), call("a"), result("zz"), comp("e0"), result("a"))
    assert safe_first_kept_id(path, "e4") == "e1"


# --- property: generated sessions with commits at random points -------------------------------


def _append(entries: list[Entry], raw: dict[str, Any]) -> None:
    raw = dict(raw) if "type" in raw else {"type": "message", "message": raw}
    raw.update(id=f"e{len(entries)}", parentId=entries[-1].id if entries else None, timestamp=TS)
    entries.append(parse_entry(raw))


def _maybe_compact(rng: random.Random, entries: list[Entry]) -> None:
    if rng.random() > 0.35:
        return
    keep = rng.choice([1, 50, 400, 2_000, 20_000])
    prep = prepare_compaction(entries, CompactionSettings(keep_recent_tokens=keep), EST)
    if prep is not None:
        _append(entries, comp(prep.first_kept_entry_id))


def _size(rng: random.Random) -> int:
    return rng.choice([10, 200, 2_000, 40_000, 120_000])


@dataclass
class Pairs:
    """What the generator made: the entry that called each tool call id, and the call id each
    tool-result entry answers (the oracle reads these, not the messages)."""

    called_in: dict[str, str] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)


def _turn(rng: random.Random, entries: list[Entry], turn: int, pairs: Pairs) -> None:
    _append(entries, user(chars(_size(rng))))
    for step in range(rng.randint(0, 3)):
        ids = [f"t{turn}.{step}.{k}" for k in range(rng.randint(1, 3))]
        _append(entries, call(*ids))
        pairs.called_in.update(dict.fromkeys(ids, entries[-1].id))
        for call_id in rng.sample(ids, len(ids)):  # parallel results arrive in any order
            _maybe_compact(rng, entries)
            if rng.random() < 0.1:
                _append(entries, {"role": "bashExecution", "command": "ls",
                                  "output": chars(_size(rng)), "exitCode": 0})
            if rng.random() < 0.1:
                _append(entries, {"type": "label", "targetId": entries[-1].id, "label": "x"})
            _append(entries, result(call_id, _size(rng)))
            pairs.answers[entries[-1].id] = call_id
        _maybe_compact(rng, entries)
    _append(entries, assistant(chars(_size(rng))))
    _maybe_compact(rng, entries)


def _assert_no_orphans(entries: list[Entry], pairs: Pairs) -> None:
    """Each tool result in the context comes after the entry that made its call."""
    context = build_session_context(SessionTree(entries), entries[-1].id)
    order = [m.entry_id for m in context.messages]
    for position, entry_id in enumerate(order):
        if entry_id in pairs.answers:
            call_entry = pairs.called_in[pairs.answers[entry_id]]
            assert call_entry in order[:position], (entry_id, call_entry, order)


@pytest.mark.parametrize("seed", range(300))
def test_generated_sessions_never_orphan_a_tool_result(seed: int) -> None:
    rng = random.Random(seed)
    entries: list[Entry] = []
    pairs = Pairs()
    for turn in range(rng.randint(2, 6)):
        _turn(rng, entries, turn, pairs)
        _assert_no_orphans(entries, pairs)
    # One more compaction at the very end, and every context along the way, holds too.
    _maybe_compact(random.Random(0), entries)
    for i in range(1, len(entries) + 1):
        _assert_no_orphans(entries[:i], pairs)
