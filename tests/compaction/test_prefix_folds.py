"""The folds a re-plan continues (file lists, the keep-ratio's token total) give what a fresh
process computes, and leave the state they continue as it was."""

from __future__ import annotations

import random
from typing import Any

import pytest

from worker.compaction import fileops
from worker.compaction.fileops import FileOps, compute_file_lists, fold_file_lists
from worker.tokens import EstimateTokenizer, JobTokenizer, counting, message_counts

PATHS = ["b.py", "a.py", "src/é.py", "README.md", "a.py"]


def _assistant(rng: random.Random) -> dict[str, Any]:
    names = ["read", "write", "edit", "ls"]
    calls = [{"type": "toolCall", "id": f"c{i}", "name": rng.choice(names),
              "arguments": {"path": rng.choice(PATHS)}} for i in range(rng.randint(0, 2))]
    return {"role": "assistant", "content": calls}


def _fresh_lists(details: Any, messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    ops = FileOps()
    if details is not None:
        fileops.add_details_file_ops(details, ops)
    fileops.extract_all_file_ops(messages, ops)
    return compute_file_lists(ops)


@pytest.mark.parametrize("seed", range(12))
def test_file_lists_of_a_grown_list_are_those_of_a_fresh_process(seed: int) -> None:
    rng = random.Random(seed)
    messages = [_assistant(rng) if rng.random() < 0.8 else {"role": "user", "content": "hi"}
                for _ in range(30)]
    previous = object() if seed % 2 else None
    details = {"readFiles": ["old.py"], "modifiedFiles": ["a.py"]} if previous else None
    states = []
    for end in (0, 5, 5, 17, 30):  # the session grows (and is planned twice at 5)
        lists = fold_file_lists(previous, details, messages[:end])
        kept = [(s, s.read, s.modified, s.ops.copy()) for s in states]
        assert (list(lists.read), list(lists.modified)) == _fresh_lists(details, messages[:end])
        for state, read, modified, ops in kept:  # the states continued are as they were
            assert (state.read, state.modified, state.ops) == (read, modified, ops)
        states.append(lists)


def test_a_changed_message_is_folded_again() -> None:
    first = [{"role": "assistant", "content": [
        {"type": "toolCall", "id": "1", "name": "read", "arguments": {"path": "x.py"}}]}]
    assert fold_file_lists(None, None, first).read == ("x.py",)
    other = [{"role": "assistant", "content": [
        {"type": "toolCall", "id": "1", "name": "edit", "arguments": {"path": "x.py"}}]}]
    lists = fold_file_lists(None, None, other)  # equal to nothing folded before: no reuse
    assert (lists.read, lists.modified) == ((), ("x.py",))


def test_running_total_is_the_total_of_the_grown_list() -> None:
    shared = JobTokenizer(EstimateTokenizer(), message_counts(EstimateTokenizer().name))
    messages = [{"role": "user", "content": "word " * n} for n in range(1, 40)]
    counting._TOTALS.clear()
    for end in (10, 10, 25, 39):
        assert shared.running_total(messages[:end]) == sum(
            EstimateTokenizer().count(m) for m in messages[:end])
    assert len(counting._TOTALS) == 3  # one per list (10 twice): a start keeps a few
    private = JobTokenizer(EstimateTokenizer())  # its own counts: nothing kept for later jobs
    kept = len(counting._TOTALS)
    assert private.running_total(messages[:5]) == sum(
        EstimateTokenizer().count(m) for m in messages[:5])
    assert len(counting._TOTALS) == kept
