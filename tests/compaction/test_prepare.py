import pytest

from helpers.sessions import assistant, chain, chars, user
from worker.compaction.prepare import (
    CompactionSettings,
    context_tokens,
    no_plan_reason,
    prepare_compaction,
    prompt_tokens,
)
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


def u(tokens: int) -> dict:
    return user(chars(tokens * 4))


def a(tokens: int, usage: dict | None = None, stop: str = "stop", tools: list = ()) -> dict:
    return assistant(chars(tokens * 4), usage=usage, stop=stop, tools=list(tools))


def comp(first_kept: str, summary: str = "old", details: dict | None = None,
         ext: bool = False) -> dict:
    entry = {"type": "compaction", "summary": summary, "firstKeptEntryId": first_kept,
             "tokensBefore": 1, "fromExtension": ext}
    if details is not None:
        entry["details"] = details
    return entry


@pytest.mark.parametrize(
    ("usage", "context", "prompt"),
    [
        ({"input": 10, "output": 5, "cacheRead": 2, "cacheWrite": 1, "totalTokens": 100}, 100, 13),
        ({"input": 10, "output": 5, "cacheRead": 2, "cacheWrite": 1, "totalTokens": 0}, 18, 13),
        ({"input": 0, "output": 5}, 5, 5),
    ],
)
def test_usage_helpers(usage: dict, context: int, prompt: int) -> None:
    assert (context_tokens(usage), prompt_tokens(usage)) == (context, prompt)


def test_no_plan_when_already_compacted_or_empty() -> None:
    path = chain(u(1), comp("e0"))
    assert prepare_compaction(path, CompactionSettings(), EST) is None
    assert no_plan_reason(path) == "already compacted"
    assert prepare_compaction([], CompactionSettings(), EST) is None
    assert no_plan_reason([]) == "nothing to compact"


def test_basic_plan_partitions_the_path() -> None:
    path = chain(u(100), a(100, tools=[("edit", {"path": "/x.py"})]), u(100),
                 a(100, tools=[("read", {"path": "/y"})]))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=150), EST)
    assert prep is not None
    assert (prep.first_kept_entry_id, prep.first_kept_entry_index, prep.is_split_turn) == (
        "e2", 2, False)
    assert prep.summarize_entry_ids == ("e0", "e1") and prep.kept_entry_ids == ("e2", "e3")
    assert prep.turn_prefix_entry_ids == () and prep.previous_summary is None
    assert prep.tokens_before == 0  # no usage anywhere
    # kept messages are not scanned
    assert (prep.read_files, prep.modified_files) == ((), ("/x.py",))


def test_usage_ratio_shrinks_keep_recent_tokens() -> None:
    usage = {"input": 800, "output": 3, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 803}
    path = chain(u(100), a(100, usage), u(100),
                 a(100, {"input": 1, "output": 1, "totalTokens": 0}, stop="aborted"))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=250), EST)
    assert prep is not None
    assert prep.tokens_before == 803  # aborted messages' usage is skipped
    # the usage measured e0..e1 (200 estimated): ratio 800 / 200 = 4 (issue 38: what it counts)
    assert prep.keep_recent_tokens == 62
    assert prep.first_kept_entry_index == 3 and prep.is_split_turn


@pytest.mark.parametrize(("path", "start", "keep", "want"), [
    # no usage: the keep as it is
    (lambda: chain(u(100), a(100)), None, 300, 300),
    # usage equal to the estimate of what it measured: ratio 1, unchanged
    (lambda: chain(u(100), a(100, {"input": 200, "totalTokens": 200})), None, 300, 300),
    # the usage covers the system prompt too: ratio 400 / 200 = 2
    (lambda: chain(u(100), a(100, {"input": 400, "totalTokens": 400})), None, 300, 150),
    # entries after the reply that carried the usage are not in its ratio
    (lambda: chain(u(100), a(100, {"input": 400, "totalTokens": 400}), u(600)), None, 300, 150),
    # after a compaction: its summary (40 chars + wrapper) and kept tail count, as the agent
    # sent them; the summarised head before the kept tail does not
    (lambda: chain(u(500), u(100), comp("e1", chars(160)), u(100),
                   a(100, {"input": 800, "totalTokens": 800})), None, 300, None),
    # a ratio below 1 never grows the keep
    (lambda: chain(u(100), a(100, {"input": 50, "totalTokens": 50})), None, 300, 300),
])
def test_adjusted_keep_counts_the_context_the_usage_measured(path, start, keep, want) -> None:
    from worker.compaction.prepare import _adjusted_keep, measured_messages

    entries = path()
    got = _adjusted_keep(entries, start, keep, EST)
    if want is None:  # the compaction case: summary + e1 (kept) + e3 + e4, not e0
        measured = measured_messages(entries)
        assert [m.get("role") for m in measured] == [
            "compactionSummary", "user", "user", "assistant"]
        want = keep * sum(EST.count(m) for m in measured) // 800
    assert got == want


@pytest.mark.parametrize("version", ["pi-1.6", "pi-0.73"])
def test_an_agent_cut_is_never_scaled(version: str) -> None:
    usage = {"input": 8000, "totalTokens": 8000}
    path = chain(u(100), a(100), u(100), a(100, usage))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=150), EST,
                              version=version)
    assert prep is not None and prep.keep_recent_tokens == 150
    assert prep.first_kept_entry_id == "e2" and not prep.is_split_turn


def model_change() -> dict:
    return {"type": "model_change", "provider": "p", "modelId": "m2"}


def note(tokens: int) -> dict:
    return {"type": "custom_message", "customType": "n", "content": chars(tokens * 4),
            "display": True}


# Where pi 1.6, pi 0.73 and Compactor's own rules part (worker/compaction/agent_cut.py):
# (path, keep, {version: (first kept id, split, summarised ids, prefix ids)}).
_PARTING = [
    # metadata before the user message the budget reaches is pulled into the kept part: pi
    # then looks for a turn start before it (a split turn of the previous turn), 1.6 too since
    # a model change starts no turn; Compactor's own rules skip the metadata (Q2).
    (lambda: chain(u(100), a(100), model_change(), u(100), a(100)), 150, {
        "pi-1.6": ("e2", True, (), ("e0", "e1")),
        "pi-0.73": ("e2", True, (), ("e0", "e1")),
        None: ("e2", False, ("e0", "e1"), ())}),
    # a custom message counts in 1.6 (its message is in the context; it starts a turn), not
    # in 0.73 nor in Compactor's own rules (Q1), which walk on to the assistant
    (lambda: chain(u(100), a(100), u(100), note(200)), 150, {
        "pi-1.6": ("e3", False, ("e0", "e1", "e2"), ()),
        "pi-0.73": ("e1", True, (), ("e0",)),
        None: ("e1", True, (), ("e0",))}),
    # after a compaction both pi versions search its kept tail too
    (lambda: chain(u(100), a(100), comp("e0"), u(20), a(20)), 100, {
        "pi-1.6": ("e1", True, (), ("e0",)),
        "pi-0.73": ("e1", True, (), ("e0",)),
        None: ("e3", False, ("e0", "e1"), ())}),
]


@pytest.mark.parametrize("case", range(len(_PARTING)))
@pytest.mark.parametrize("version", ["pi-1.6", "pi-0.73", None])
def test_where_the_agents_cuts_part(case: int, version: str | None) -> None:
    build, keep, want = _PARTING[case]
    prep = prepare_compaction(build(), CompactionSettings(keep_recent_tokens=keep), EST,
                              version=version)
    assert prep is not None
    assert (prep.first_kept_entry_id, prep.is_split_turn, prep.summarize_entry_ids,
            prep.turn_prefix_entry_ids) == want[version]


def test_split_turn_lists() -> None:
    path = chain(u(100), a(10), u(100), a(100), a(100))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=150), EST)
    assert prep is not None and prep.is_split_turn
    assert (prep.turn_start_index, prep.first_kept_entry_index) == (2, 3)
    assert prep.summarize_entry_ids == ("e0", "e1")
    assert prep.turn_prefix_entry_ids == ("e2",) and prep.kept_entry_ids == ("e3", "e4")


def test_previous_compaction_kept_range_is_summarised_and_tags_stripped() -> None:
    summary = ("old summary\n\n<read-files>\n/r\n</read-files>\n\n"
               "<modified-files>\n/m\n</modified-files>")
    details = {"readFiles": ["/r"], "modifiedFiles": ["/m"]}
    path = chain(u(10), a(10), u(10), comp("e2", summary, details), u(100), a(100), u(100), a(100))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=150), EST)
    assert prep is not None
    assert prep.previous_summary == "old summary"
    # Q5: e2 (kept by the old compaction) first
    assert prep.summarize_entry_ids == ("e2", "e4", "e5")
    assert prep.first_kept_entry_index == 6
    assert (prep.read_files, prep.modified_files) == (("/r",), ("/m",))


def test_extension_compaction_details_are_ignored() -> None:
    path = chain(u(10), comp("zz", "s", {"readFiles": ["/r"], "modifiedFiles": []}, ext=True),
                 u(100), a(100))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=10), EST)
    assert prep is not None and prep.read_files == () and prep.summarize_entry_ids == ()


@pytest.mark.parametrize(("ext", "carried"), [
    (True, [("requests", "go on"), ("paths", "r.py"), ("paths", "m.py")]),
    (False, [("requests", "go on")]),  # a model's tags come back through details instead
])
def test_a_hooks_tagged_paths_are_carried_as_facts(ext: bool, carried: list) -> None:
    from worker.compaction.fileops import format_file_operations

    summary = ("hook text\n\n<session-facts>\nrequests:\n- go on\n</session-facts>"
               + format_file_operations(["r.py"], ["m.py"]))
    path = chain(u(500), a(500), comp("e1", summary, ext=ext), u(500), a(500), u(500), a(500))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=600), EST)
    assert prep is not None and list(prep.carried_facts) == carried


def test_planned_messages_are_those_after_the_last_compaction() -> None:
    # What a cold job primes its token counts for (worker.service._compact_job._prime).
    from api_client.contract.session import parse_entry
    from worker.compaction import planned_messages

    path = [parse_entry(e) for e in [
        {"type": "message", "id": "a", "parentId": None, "timestamp": "t",
         "message": {"role": "user", "content": "old", "timestamp": 1}},
        {"type": "compaction", "id": "c", "parentId": "a", "timestamp": "t", "summary": "s",
         "firstKeptEntryId": "a", "tokensBefore": 1},
        {"type": "message", "id": "b", "parentId": "c", "timestamp": "t",
         "message": {"role": "user", "content": "new", "timestamp": 2}},
    ]]
    assert [m["content"] for m in planned_messages(path)] == ["new"]
    assert [m["content"] for m in planned_messages(path[:1])] == ["old"]


def test_planned_messages_for_a_prune_pass_add_the_older_tool_results() -> None:
    # The prune pass counts every tool result on the path (docs/compaction.md "Pruning"), also
    # before the last
    # compaction: a cold automatic job primes those too; older user/assistant text it does not.
    from api_client.contract.session import parse_entry
    from worker.compaction import plan_prune, planned_messages

    def msg(i: str, parent: str | None, role: str, text: str) -> dict:
        message = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}
        if role == "toolResult":
            message |= {"toolCallId": f"call-{i}", "toolName": "bash", "isError": False}
        return {"type": "message", "id": i, "parentId": parent, "timestamp": "t",
                "message": message}

    path = [parse_entry(e) for e in [
        msg("a", None, "user", "old question"),
        msg("b", "a", "toolResult", "old output"),
        {"type": "compaction", "id": "c", "parentId": "b", "timestamp": "t", "summary": "s",
         "firstKeptEntryId": "b", "tokensBefore": 1},
        msg("d", "c", "user", "new question"),
        msg("e", "d", "toolResult", "new output"),
    ]]

    def texts(messages: list) -> list[str]:
        return [m["content"][0]["text"] for m in messages]

    assert texts(planned_messages(path)) == ["new question", "new output"]
    assert texts(planned_messages(path, prune=True)) == ["old output", "new question",
                                                           "new output"]
    counted: list[str] = []

    class Recording:
        name = "recording"

        def count(self, message: dict) -> int:
            counted.append(message["content"][0]["text"])
            return 1

        def count_text(self, text: str) -> int:
            return 1

    plan_prune(path, Recording())
    # Every tool result the prune pass counts was primed.
    tool_results = {t for t in counted if "output" in t}
    assert tool_results == {"old output", "new output"}
    assert tool_results <= set(texts(planned_messages(path, prune=True)))


def test_an_agent_cut_that_would_orphan_a_tool_result_is_compactors_own() -> None:
    from helpers.sessions import tool_result
    from worker.compaction.agent_cut import agent_cut

    # a custom message between a call and its result: pi 1.6 may cut there
    path = chain(u(100), assistant("", tools=[("bash", {"command": "ls"})]), note(50),
                 tool_result(chars(400)), a(100))
    theirs = agent_cut(path, 220, EST, "pi-1.6")
    assert theirs is not None and path[theirs.first_kept_entry_index].id == "e2"
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=220), EST,
                              version="pi-1.6")
    assert prep is not None and prep.first_kept_entry_id not in ("e2", "e3")
