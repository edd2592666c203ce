import pytest

from helpers.sessions import assistant, chain, chars, tool_result, user
from worker.compaction.cutpoint import (
    CutPoint,
    find_cut_point,
    find_turn_start_index,
    find_valid_cut_points,
)
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


def u(tokens: int) -> dict:
    return user(chars(tokens * 4))


def a(tokens: int) -> dict:
    return assistant(chars(tokens * 4))


BASH = {"role": "bashExecution", "command": "", "output": chars(400), "exitCode": 0}
CUSTOM_MSG = {"type": "custom_message", "customType": "x", "content": chars(400), "display": True}
CUSTOM_ROLE = {"role": "custom", "customType": "x", "content": chars(400), "display": True}
MODEL = {"type": "model_change", "model": "a/b"}
THINK = {"type": "thinking_level_change", "thinkingLevel": "low"}


@pytest.mark.parametrize(
    ("items", "keep", "expected"),
    [
        ([u(100), a(100), u(100), a(100)], 150, (2, -1, False)),
        ([u(100), a(100), u(100), a(100)], 250, (1, 0, True)),  # cut at an assistant: split turn
        ([u(100), a(100), u(100), a(100)], 1000, (0, -1, False)),  # everything fits
        # Q3: the newest tool result alone exceeds the budget -> nearest cut point before it
        ([u(10), a(10), tool_result(chars(800))], 100, (1, 0, True)),
        # Q2: metadata pulled in before a user message does not make a split turn
        ([u(10), a(10), MODEL, THINK, u(100), a(100)], 150, (2, -1, False)),
        # Q4: a cut at a bash execution or a custom_message is clean
        ([u(10), a(10), BASH, a(100)], 150, (2, -1, False)),
        # (the custom_message is pulled in before the assistant the budget stops at)
        ([u(10), a(10), CUSTOM_MSG, a(100)], 50, (2, -1, False)),
        # Q1: a custom-role message counts its text and is a cut point and turn start
        ([u(10), a(10), tool_result("r"), CUSTOM_ROLE, a(100)], 150, (3, -1, False)),
        # custom_message entries are not counted while walking back
        ([u(100), CUSTOM_MSG, a(10)], 50, (0, -1, False)),
        # no valid cut points at all
        ([tool_result("a"), tool_result("b")], 1, (0, -1, False)),
    ],
)
def test_find_cut_point(items: list, keep: int, expected: tuple[int, int, bool]) -> None:
    entries = chain(*items)
    assert find_cut_point(entries, 0, len(entries), keep, EST) == CutPoint(*expected)


def test_cut_point_respects_the_start_boundary() -> None:
    entries = chain(u(100), a(100), {"type": "compaction", "summary": "s",
                                     "firstKeptEntryId": "e0", "tokensBefore": 1},
                    a(100), u(100), a(100))
    # the search range starts after the compaction: the assistant at 3 is a split turn with no
    # turn start
    assert find_cut_point(entries, 3, 6, 250, EST) == CutPoint(3, -1, False)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([u(1), a(1), tool_result("x"), BASH, CUSTOM_MSG, CUSTOM_ROLE, MODEL], [0, 1, 3, 4, 5]),
        ([{"role": "fileMention", "files": []},
          {"role": "pythonExecution", "code": "", "output": ""}], []),
        ([{"type": "branch_summary", "fromId": "root", "summary": ""},
          {"role": "hookMessage", "content": "x"}], [0, 1]),
    ],
)
def test_valid_cut_points(items: list, expected: list[int]) -> None:
    entries = chain(*items)
    assert find_valid_cut_points(entries, 0, len(entries)) == expected


def test_turn_start_index() -> None:
    entries = chain(u(1), a(1), tool_result("x"), a(1))
    assert find_turn_start_index(entries, 3, 0) == 0
    assert find_turn_start_index(entries, 3, 1) == -1


def _listed_cut_point(entries: list, start: int, end: int, keep: int) -> CutPoint:
    """The cut point as the reference finds it: every valid cut point listed first."""
    from worker.compaction.cutpoint import _pull_in_metadata, classify_cut

    cps = find_valid_cut_points(entries, start, end)
    if not cps:
        return CutPoint(start, -1, False)
    acc, cut = 0, cps[0]
    for i in range(end - 1, start - 1, -1):
        message = getattr(entries[i], "message", None)
        if message is None or entries[i].type != "message":
            continue
        acc += EST.count(message)
        if acc >= keep:
            after = [c for c in cps if c >= i]
            cut = after[0] if after else [c for c in cps if c < i][-1]
            break
    return classify_cut(entries, _pull_in_metadata(entries, cut, start), start, end)


@pytest.mark.parametrize("seed", range(60))
def test_find_cut_point_is_the_cut_point_of_every_listed_one(seed: int) -> None:
    import random

    rng = random.Random(seed)
    kinds = [lambda: u(rng.randint(1, 60)), lambda: a(rng.randint(1, 60)),
             lambda: tool_result(chars(rng.randint(1, 400))), lambda: BASH,
             lambda: CUSTOM_MSG, lambda: MODEL]
    entries = chain(*(rng.choice(kinds)() for _ in range(rng.randint(1, 25))))
    start = rng.randint(0, len(entries) - 1)
    for keep in (1, 30, 120, 10_000):
        assert find_cut_point(entries, start, len(entries), keep, EST) == \
            _listed_cut_point(entries, start, len(entries), keep)
