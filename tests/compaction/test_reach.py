"""A job reads the leaf's path back only as far as ``worker.compaction.reach`` says: the plan
and the prune plan made on that end of the path are the ones made on the whole path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import pytest

from api_client.contract.session import Entry, load_session, parse_entry
from helpers.long_sessions import build, growth, jsonl
from worker.compaction import (
    CompactionSettings,
    Preparation,
    apply_prune,
    get_tokenizer,
    plan_prune,
    prepare_compaction,
)
from worker.compaction.reach import compaction_reach, plan_reached, prune_reached
from worker.store.paths import Reach

TOKENIZER = get_tokenizer("estimate")
SETTINGS = CompactionSettings()


def read_back(path: Sequence[Entry], reach: Reach, pruned: str | None) -> Sequence[Entry]:
    """What ``worker.store.paths`` reads: the shortest end of ``path`` that ``reach`` takes."""
    for start in range(len(path) - 1, 0, -1):
        if reach(path[start:], pruned):
            return path[start:]
    return path


def assert_same_plan(part: Sequence[Entry], whole: Sequence[Entry]) -> None:
    offset = len(whole) - len(part)
    mine, theirs = (prepare_compaction(p, SETTINGS, TOKENIZER) for p in (part, whole))
    assert (mine is None) is (theirs is None)
    if mine is None or theirs is None:
        return
    assert mine.first_kept_entry_index + offset == theirs.first_kept_entry_index
    assert (mine.turn_start_index + offset if mine.turn_start_index >= 0 else -1) == (
        theirs.turn_start_index)
    moved = ("first_kept_entry_index", "turn_start_index")
    for field in (f.name for f in fields(Preparation) if f.name not in moved):
        assert getattr(mine, field) == getattr(theirs, field), field


def _pruned(path: list[Entry]) -> tuple[list[Entry], str | None]:
    """``path`` after a prune pass, and the watermark that pass records."""
    plan = plan_prune(path, TOKENIZER)
    if not plan.pruned_entry_ids:
        return path, None
    out = []
    for entry in path:
        if entry.id in plan.token_counts:
            raw = {**entry.raw, "message": apply_prune(entry.raw["message"],
                                                        plan.token_counts[entry.id], 1)}
            entry = parse_entry(raw)
        out.append(entry)
    return out, plan.pruned_entry_ids[-1]


def _grown(path: list[Entry], salt: int) -> list[Entry]:
    out, parent = list(path), path[-1].id
    for n, body in enumerate(growth(400_000, salt)):
        entry = parse_entry({"type": body["type"], "id": f"g{salt}-{n}", "parentId": parent,
                             **{k: v for k, v in body.items() if k != "type"}})
        out.append(entry)
        parent = entry.id
    return out


@pytest.fixture(scope="module")
def compacted(pi_dir: Path) -> list[Entry]:
    session = load_session(jsonl(build(3_000, compacted=True, fixtures=pi_dir)))
    return session.tree().path_to(session.tree().leaf_id)


def test_the_plan_on_the_fixtures_read_back_is_the_plan(pi_file: Path) -> None:
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    path = tree.path_to(tree.leaf_id)
    part = read_back(path, lambda p, w: plan_reached(p), None)
    assert_same_plan(part, path)
    if pi_file.stem == "before-compaction":  # two compactions: the plan reads the last one on
        assert len(part) < len(path) / 2


def test_a_session_compacted_before_is_read_from_the_kept_boundary(
        compacted: list[Entry]) -> None:
    part = read_back(compacted, lambda p, w: plan_reached(p), None)
    assert 100 < len(part) < len(compacted) / 3
    assert_same_plan(part, compacted)


def test_the_prune_plan_reads_back_to_the_watermark_and_no_further(
        compacted: list[Entry]) -> None:
    pruned, watermark = _pruned(compacted)
    assert watermark is not None
    grown = _grown(pruned, 1)  # results the watermark does not cover: the next plan's
    whole = plan_prune(grown, TOKENIZER)
    part = read_back(grown, lambda p, w: compaction_reach(p, w, prune=True), watermark)
    assert len(part) < len(grown) - 1_000 and any(e.id == watermark for e in part)
    assert plan_prune(part, TOKENIZER) == whole and whole.pruned_entry_ids
    assert_same_plan(part, grown)
    assert not prune_reached(grown, None)  # no watermark: the whole path


def test_a_kept_result_whose_call_is_further_back_is_read_to_its_call(
        compacted: list[Entry]) -> None:
    """Q22 looks for the call of each kept tool result: the read goes on until it is found."""
    part = read_back(compacted, lambda p, w: plan_reached(p), None)
    calls = [i for i, e in enumerate(compacted[:len(compacted) - len(part)])
             if e.raw.get("message", {}).get("role") == "assistant"
             and any(b.get("type") == "toolCall" for b in e.raw["message"].get("content", [])
                     if isinstance(b, dict))]
    call = compacted[calls[-1]]
    call_id = next(b["id"] for b in call.raw["message"]["content"] if b.get("type") == "toolCall")
    result = parse_entry({"type": "message", "id": "late-result", "parentId": part[-1].id,
                          "timestamp": "2026-01-01T00:00:00.000Z",
                          "message": {"role": "toolResult", "toolCallId": call_id,
                                      "toolName": "bash", "timestamp": 1,
                                      "content": [{"type": "text", "text": "late"}]}})
    grown = [*compacted, result]
    further = read_back(grown, lambda p, w: plan_reached(p), None)
    assert len(further) >= len(grown) - calls[-1]
    assert_same_plan(further, grown)
