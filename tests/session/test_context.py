import pytest

from api_client.contract.session.context import build_session_context, context_messages
from helpers.sessions import assistant, chain, tree, user


def comp(first_kept: str, summary: str = "S") -> dict:
    return {"type": "compaction", "summary": summary, "firstKeptEntryId": first_kept,
            "tokensBefore": 5}


def ids(entries: list, leaf: object = ...) -> list[tuple[str, str]]:
    ctx = (build_session_context(tree(entries)) if leaf is ...
           else build_session_context(tree(entries), leaf))  # type: ignore[arg-type]
    return [(m.message["role"], m.entry_id) for m in ctx.messages]


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([user("a"), assistant("b")], [("user", "e0"), ("assistant", "e1")]),
        ([user("a"), {"type": "branch_summary", "fromId": "e0", "summary": ""}, user("c")],
         [("user", "e0"), ("user", "e2")]),
        ([user("a"), {"type": "branch_summary", "fromId": "e0", "summary": "s"}],
         [("user", "e0"), ("branchSummary", "e1")]),
        ([{"type": "custom_message", "customType": "x", "content": "c", "display": False}],
         [("custom", "e0")]),
        ([user("a"), {"type": "label", "targetId": "e0", "label": "l"},
          {"type": "custom", "customType": "x"},
          {"type": "session_init", "systemPrompt": "", "task": "", "tools": []}, {"type": "weird"}],
         [("user", "e0")]),
        # compaction keeps from firstKeptEntryId up to itself, then what follows
        ([user("a"), user("b"), user("c"), comp("e1"), user("d")],
         [("compactionSummary", "e3"), ("user", "e1"), ("user", "e2"), ("user", "e4")]),
        # an unknown firstKeptEntryId keeps nothing from before the compaction
        ([user("a"), comp("zz"), user("d")], [("compactionSummary", "e1"), ("user", "e2")]),
        # the last compaction wins; the earlier one contributes nothing even inside the kept range
        ([user("a"), comp("e0", "old"), user("b"), comp("e0", "new"), user("c")],
         [("compactionSummary", "e3"), ("user", "e0"), ("user", "e2"), ("user", "e4")]),
        # firstKeptEntryId may name a non-message entry: only ids are compared
        ([user("a"), {"type": "thinking_level_change", "thinkingLevel": "high"}, user("b"),
          comp("e1")],
         [("compactionSummary", "e3"), ("user", "e2")]),
    ],
)
def test_messages(items: list, expected: list) -> None:
    assert ids(chain(*items)) == expected
    # A path in hand gives the same messages without a tree (a worker's tokens after).
    built = tree(chain(*items))
    path = built.path_to(built.entries[-1].id)
    assert [(m.message["role"], m.entry_id) for m in context_messages(path)] == expected


def test_settings_follow_the_path() -> None:
    entries = chain(
        {"type": "thinking_level_change", "thinkingLevel": "low"},
        {"type": "model_change", "model": "a/b"},
        {"type": "model_change", "model": "c/d", "role": "smol"},
        {"type": "model_change", "provider": "legacy", "modelId": "x"},
        assistant("x", provider="anthropic", model="opus", stop="error"),
        {"type": "ttsr_injection", "injectedRules": ["r1", "r2"]},
        {"type": "ttsr_injection", "injectedRules": ["r1"]},
        {"type": "mode_change", "mode": "plan", "data": {"k": 1}},
        {"type": "thinking_level_change", "thinkingLevel": "high"},
    )
    ctx = build_session_context(tree(entries))
    assert ctx.thinking_level == "high"
    assert ctx.models == {"default": "anthropic/opus", "smol": "c/d"}
    assert ctx.injected_ttsr_rules == ("r1", "r2")
    assert (ctx.mode, ctx.mode_data) == ("plan", {"k": 1})


def test_leaf_selection() -> None:
    entries = chain(user("a"), user("b"))
    assert ids(entries, None) == []
    assert ids(entries, "e0") == [("user", "e0")]
    assert ids(entries, "unknown") == [("user", "e0"), ("user", "e1")]
    assert build_session_context(tree([])).messages == ()
