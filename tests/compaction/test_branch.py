import pytest

from helpers.sessions import TS, assistant, chain, chars, tool_result, tree, user
from worker.compaction.branch import (
    branch_budget,
    branch_destination,
    collect_entries_for_branch_summary,
    prepare_branch_entries,
)
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


def forked() -> list:
    """e0 - e1 - e2 - e3 (old leaf) and e1 - f4 - e5 (other branch)."""
    main = chain(user("root"), assistant("a1"), user("u2"), assistant("a3"))
    side = chain({"type": "message", "message": user("f4"), "parentId": "e1", "id": "f4",
                  "timestamp": TS},
                 assistant("f5"), start=4)
    return main + side


@pytest.mark.parametrize(
    ("old_leaf", "target", "ancestor", "collected"),
    [
        ("e3", "e5", "e1", ["e2", "e3"]),
        ("e3", "e1", "e1", ["e2", "e3"]),  # target is an ancestor: entries strictly after it
        ("e1", "e3", "e1", []),  # target is a descendant: nothing
        (None, "e3", None, []),
    ],
)
def test_collect(old_leaf: str | None, target: str, ancestor: str | None,
                 collected: list[str]) -> None:
    result = collect_entries_for_branch_summary(tree(forked()), old_leaf, target)
    assert result.common_ancestor_id == ancestor
    assert [e.id for e in result.entries] == collected


@pytest.mark.parametrize(
    ("window", "reserve", "budget"),
    [
        (200_000, 16_384, 183_616),
        (None, 16_384, 111_616),
        (10_000, 16_384, 4_096),
        (0, 0, 128_000),
    ],
)
def test_budget_has_a_floor(window: int | None, reserve: int, budget: int) -> None:
    assert branch_budget(window, reserve) == budget


def test_prepare_skips_tool_results_and_stops_at_the_budget() -> None:
    entries = chain(
        user(chars(400)),                                           # e0 100 tokens
        assistant(tools=[("edit", {"path": "/old"})]),              # e1 (older than the budget
                                                                    # break)
        assistant(chars(400), tools=[("write", {"path": "/w"})]),   # e2 breaks the budget, still
                                                                    # gives file ops
        tool_result(chars(4000)),                                   # e3 skipped
        user(chars(400)),                                           # e4 100
        {"type": "branch_summary", "fromId": "e0", "summary": chars(40),
         "details": {"readFiles": ["/r"], "modifiedFiles": []}},
    )
    prep = prepare_branch_entries(entries, 150, EST)
    assert prep.included_entry_ids == ("e4", "e5")
    assert prep.total_tokens == 110
    assert (prep.read_files, prep.modified_files) == (("/r",), ("/w",))


def test_summaries_squeeze_in_below_90_percent() -> None:
    big_summary = {"type": "branch_summary", "fromId": "root", "summary": chars(400)}  # 100 tokens
    # user 50 tokens, then the summary would make 150
    entries = chain(big_summary, user(chars(200)))
    assert prepare_branch_entries(entries, 100, EST).included_entry_ids == ("e0", "e1")
    entries = chain(big_summary, user(chars(400)))  # 100 >= 0.9 * 100: no squeeze
    assert prepare_branch_entries(entries, 100, EST).included_entry_ids == ("e1",)


def test_compactions_become_summary_messages() -> None:
    entries = chain(user("a"), {"type": "compaction", "summary": "S", "firstKeptEntryId": "e0",
                                "tokensBefore": 3, "shortSummary": "s"})
    prep = prepare_branch_entries(entries, 0, EST)
    assert (prep.messages[1]["role"] == "compactionSummary"
            and prep.messages[1]["shortSummary"] == "s")


@pytest.mark.parametrize(("target", "leaf"), [("e2", "e1"), ("e3", "e3"), ("e0", None)])
def test_destination(target: str, leaf: str | None) -> None:
    entries = chain(user("a"), assistant("b"), user("c"),
                    {"type": "custom_message", "customType": "x", "content": "", "display": True})
    expected = "e2" if target == "e3" else leaf  # a custom_message goes back to its parent as well
    assert branch_destination(tree(entries), target) == expected
