import pytest

from helpers.sessions import assistant, chain, chars, tool_result, user
from worker.compaction.prune import apply_prune, plan_prune, prune_notice
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


def results(*specs: tuple[int, str]) -> list:
    """A user message, then per spec an assistant call and a tool result of `tokens` tokens."""
    items: list = [user("go")]
    for tokens, tool in specs:
        items += [assistant(tools=[(tool, {})]), tool_result(chars(tokens * 4), tool)]
    return chain(*items)


@pytest.mark.parametrize(
    ("specs", "pruned_results", "saved"),
    [
        # newest 40k protected (the one crossing 40k too); the notice costs ceil(33/4) = 9 tokens
        ([(25_000, "bash"), (30_000, "bash"), (10_000, "bash")], [0], 25_000 - 9),
        # savings below 20k: nothing changes
        ([(15_000, "bash"), (30_000, "bash"), (10_000, "bash")], [], 0),
        # protected tools are never candidates
        ([(25_000, "read"), (25_000, "skill"), (40_000, "bash")], [], 0),
        # exactly 40k newer: the older one is a candidate (acc < 40k check uses the total before it)
        ([(20_009, "bash"), (40_000, "bash")], [0], 20_000),  # savings exactly the minimum do prune
        ([(20_008, "bash"), (40_000, "bash")], [], 0),
        ([(12_000, "bash"), (12_000, "grep"), (39_999, "bash"), (1, "bash")], [0, 1],
         2 * (12_000 - 9)),
    ],
)
def test_plan(specs: list, pruned_results: list[int], saved: int) -> None:
    path = results(*specs)
    result_ids = [e.id for e in path if e.raw["message"]["role"] == "toolResult"]
    plan = plan_prune(path, EST)
    assert plan.pruned_entry_ids == tuple(result_ids[i] for i in pruned_results)
    assert plan.tokens_saved == saved


def test_already_pruned_results_count_but_are_not_candidates() -> None:
    path = chain(user("go"), tool_result(chars(100_000), prunedAt=None),
                 tool_result(chars(25_000 * 4)),
                 tool_result(chars(40_000 * 4)))
    plan = plan_prune(path, EST)
    assert plan.pruned_entry_ids == ("e2",)


def test_apply_prune_replaces_content_and_sets_pruned_at() -> None:
    message = tool_result("long", details={"k": 1})
    message["content"].append({"type": "image", "data": "x", "mimeType": "i"})
    pruned = apply_prune(message, 1234, now_ms=99)
    assert pruned["content"] == [{"type": "text", "text": "[Output truncated - 1234 tokens]"}]
    assert pruned["prunedAt"] == 99 and pruned["details"] == {"k": 1}
    assert len(message["content"]) == 2  # the input is not modified
    assert prune_notice(5) == "[Output truncated - 5 tokens]"


def test_a_notice_counts_as_its_text() -> None:
    # A tool result of the notice's one text block: ceil4(len(notice)) with the estimate.
    specs = [(25_000 + 17 * i, "bash") for i in range(3)] + [(45_000, "bash")]
    plan = plan_prune(results(*specs), EST)
    assert len(plan.pruned_entry_ids) == 3
    assert plan.tokens_saved == sum(t - -(-len(prune_notice(t)) // 4)
                                    for t in plan.token_counts.values())
