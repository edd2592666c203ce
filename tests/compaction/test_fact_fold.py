"""The facts fold continued (a re-plan of a grown session) gives what a fold from the start
gives, and never changes the state it continues."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from worker.compaction import facts
from worker.compaction.fact_fold import FactFold, _nested, fold_more
from worker.tokens.memo import PrefixFolds

Key = tuple[str, str]
PATHS = ["a", "a/b", "a/b/c.py", "b/c.py", "src/a/b/c.py", "x.py", "src/x.py", "c.py", "/"]


def _named(rng: random.Random, n: int) -> list[list[Key]]:
    kinds = ["paths", "paths", "commands", "requests"]
    return [[(kind, rng.choice(PATHS) if kind == "paths" else rng.choice("uvw") * rng.randint(1, 3))
             for kind in rng.choices(kinds, k=rng.randint(0, 4))] for _ in range(n)]


def _seen(fold: FactFold) -> list[tuple[str, str, int, int]]:
    return [(f.kind, f.text, f.count, f.last) for f in fold.listed]


def _values(fold: FactFold) -> list[tuple[str, str, int, int]]:
    return [(f.kind, f.text, f.count, f.last) for f in fold.facts.values()]


@pytest.mark.parametrize("seed", range(40))
def test_a_continued_fold_is_the_fold_from_the_start(seed: int) -> None:
    rng = random.Random(seed)
    named = _named(rng, rng.randint(0, 30))
    carried: Sequence[Key] = [("paths", rng.choice(PATHS)) for _ in range(rng.randint(0, 2))]
    whole = fold_more(None, carried, enumerate(named))
    cuts = sorted(rng.sample(range(len(named) + 1), k=min(3, len(named) + 1)))
    state: FactFold | None = None
    done = 0
    for cut in [*cuts, len(named)]:
        previous = state
        kept = None if previous is None else (_values(previous), _seen(previous))
        state = fold_more(state, carried, enumerate(named[done:cut], start=done))
        if previous is not None:  # the continued state is as it was
            assert (_values(previous), _seen(previous)) == kept
        done = cut
    assert state is not None
    assert _seen(state) == _seen(whole)
    assert _values(state) == _values(whole)


def test_a_continuation_leaves_the_state_it_continues_as_it_was() -> None:
    first = fold_more(None, [], enumerate([[("paths", "a/b")], [("paths", "x.py")]]))
    kept = (_values(first), _seen(first))
    more = fold_more(first, [], enumerate([[("paths", "a/b")], [("paths", "src/a/b/c.py")]],
                                          start=2))
    assert (_values(first), _seen(first)) == kept
    assert _values(more) == [("paths", "a/b", 2, 2), ("paths", "x.py", 1, 1),
                             ("paths", "src/a/b/c.py", 1, 3)]
    assert [f.text for f in more.listed] == ["x.py", "src/a/b/c.py"]  # a/b: inside a new path


@pytest.mark.parametrize("seed", range(20))
def test_a_path_inside_another_is_found_as_by_comparing_every_pair(seed: int) -> None:
    rng = random.Random(seed)
    parts = ["src", "a", "b.py", "/", "x\0y", "lib/a", "ü", "a.py"]
    paths = list({"".join(rng.choices(parts, k=rng.randint(1, 4))) for _ in range(40)})
    assert _nested(paths) == {p for p in paths if any(p in q and p != q for q in paths)}


class _Calls:
    def __init__(self) -> None:
        self.seen: list[tuple[bool, list[int], int]] = []

    def __call__(self, state: list[int] | None, rest: Sequence[object],
                 offset: int) -> list[int]:
        self.seen.append((state is not None, [id(x) for x in rest], offset))
        return [*(state or []), *(id(x) for x in rest)]


def test_prefix_folds_fold_only_past_what_they_folded_before() -> None:
    folds: PrefixFolds[object, list[int]] = PrefixFolds()
    objs = [object() for _ in range(6)]
    calls = _Calls()
    assert folds.fold("t", objs[:4], calls) == [id(x) for x in objs[:4]]
    assert folds.fold("t", objs, calls) == [id(x) for x in objs]
    assert folds.fold("t", objs, calls) == [id(x) for x in objs]  # the same: no call
    assert calls.seen == [(False, [id(x) for x in objs[:4]], 0),
                          (True, [id(x) for x in objs[4:]], 4)]


@pytest.mark.parametrize("other", ["another tag", "a changed object", "a shorter list"])
def test_prefix_folds_start_over_where_the_objects_differ(other: str) -> None:
    folds: PrefixFolds[object, list[int]] = PrefixFolds()
    objs = [object() for _ in range(4)]
    calls = _Calls()
    folds.fold("t", objs, calls)
    tag, again = "t", list(objs)
    if other == "another tag":
        tag = "u"
    elif other == "a changed object":
        again[2] = object()
    else:
        again = objs[:3]
    assert folds.fold(tag, again, calls) == [id(x) for x in again]
    assert calls.seen[-1] == (False, [id(x) for x in again], 0)


def test_prefix_folds_are_bounded() -> None:
    folds: PrefixFolds[object, list[int]] = PrefixFolds(max_objects=2)
    lists = [[object()] for _ in range(3)]
    calls = _Calls()
    for objs in lists:
        folds.fold("t", objs, calls)
    assert len(folds) == 2
    folds.fold("t", lists[0], calls)  # evicted: folded again
    assert calls.seen[-1][0] is False and len(calls.seen) == 4
    folds.fold("t", lists[2], calls)  # kept: no call
    assert len(calls.seen) == 4


def _message(rng: random.Random) -> dict[str, object]:
    if rng.random() < 0.3:
        issue = rng.randint(1, 9)
        return {"role": "user", "content": f"please fix {rng.choice(PATHS)} and issue #{issue}"}
    calls = [{"type": "toolCall", "id": "c", "name": rng.choice(["read", "bash"]),
              "arguments": {"path": rng.choice(PATHS)} if rng.random() < 0.5
              else {"command": f"cat {rng.choice(PATHS)} | grep x"}}]
    return {"role": "assistant", "content": calls}


@pytest.mark.parametrize("seed", range(10))
def test_extract_facts_of_a_grown_list_is_that_of_a_fresh_process(seed: int) -> None:
    rng = random.Random(seed)
    messages = [_message(rng) for _ in range(40)]
    carried = [("paths", "a/b"), ("commands", "make test")]
    folds: PrefixFolds[object, FactFold] = PrefixFolds()
    for end in (10, 25, 40):  # the session grows, and is planned again
        grown = facts.extract_facts(messages[:end], carried, folds=folds)
    fresh = facts.extract_facts(messages, carried)
    assert [(f.kind, f.text, f.count, f.last) for f in grown] == \
        [(f.kind, f.text, f.count, f.last) for f in fresh]


def test_prefix_folds_continue_two_branches_from_their_fork() -> None:
    folds: PrefixFolds[object, list[int]] = PrefixFolds(per_start=3)
    base = [object() for _ in range(3)]
    left, right = [*base, object()], [*base, object(), object()]
    calls = _Calls()
    folds.fold("t", base, calls)
    folds.fold("t", left, calls)
    folds.fold("t", right, calls)  # the base's fold, not the left branch's
    assert calls.seen[-1] == (True, [id(x) for x in right[3:]], 3)
    folds.fold("t", [*left, object()], calls)  # the left branch's fold is still kept
    assert calls.seen[-1][2] == 4
    assert len(folds) == 3  # three per start: the base's went (the least recently used)
    folds.fold("t", [*base, object()], calls)
    assert calls.seen[-1] == (False, calls.seen[-1][1], 0)  # so a new branch starts over


def test_prefix_folds_hold_no_more_objects_than_their_bound() -> None:
    folds: PrefixFolds[object, list[int]] = PrefixFolds(max_objects=5)
    calls = _Calls()
    first, second = [object() for _ in range(3)], [object() for _ in range(3)]
    folds.fold("t", first, calls)
    folds.fold("t", second, calls)  # 6 objects: the first start is evicted
    assert len(folds) == 1
    folds.fold("t", first, calls)
    assert calls.seen[-1][0] is False  # folded from the start again
    large = [object() for _ in range(6)]
    assert folds.fold("t", large, calls) == [id(x) for x in large]
    assert len(folds) == 1  # larger than the bound: computed, not kept
