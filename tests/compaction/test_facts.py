"""The fact ledger: extraction, the check against summary + kept text, the bounded block."""

from __future__ import annotations

from typing import Any

import pytest

from helpers.sessions import assistant, chain, chars, user
from worker.compaction.facts import (
    FACT_KINDS,
    Fact,
    apply_ledger,
    estimate_tokens,
    extract_facts,
    parse_fact_block,
    strip_fact_block,
)
from worker.compaction.fileops import format_file_operations, strip_file_operation_tags
from worker.compaction.ledger import compaction_ledger
from worker.compaction.prepare import CompactionSettings, prepare_compaction
from worker.tokens import EstimateTokenizer


def err(text: str) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": "c0", "toolName": "bash", "isError": True,
            "content": [{"type": "text", "text": text}], "timestamp": 1}


def kinds(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {k: [] for k in FACT_KINDS}
    for fact in extract_facts(messages):
        out[fact.kind].append(fact.text)
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([assistant(tools=[("read", {"path": "src/a.py"}), ("edit", {"path": "/b/c.ts"})])],
         {"paths": ["src/a.py", "/b/c.ts"]}),
        ([assistant(tools=[("bash",
                            {"command": "  pytest   -q tests/x_test.py\n  && echo done"})])],
         {"commands": ["pytest -q tests/x_test.py"], "paths": ["tests/x_test.py"]}),
        # deduped, without the pipe; a read: its path
        ([assistant(tools=[("bash", {"command": "cat README.md | head"})]),
          assistant(tools=[("bash", {"command": "cat README.md | head"})])],
         {"commands": ["cat"], "paths": ["README.md"]}),
        ([assistant(tools=[("bash", {"command": 'grep -n "retry(" src/x.ts'})])],
         {"commands": ['grep -n "retry("'], "paths": ["src/x.ts"]}),  # a read up to its first path
        ([assistant(tools=[("bash", {"command": "sed -n 1,5p src/x.ts"}),
                           ("bash", {"command": "sed -i 's/a/b/' src/x.ts"})])],
         {"commands": ["sed -n 1,5p", "sed -i 's/a/b/' src/x.ts"], "paths": ["src/x.ts"]}),
        ([user("fix the flaky retry test in the worker, then run the whole suite again")],
         {"requests": ["fix the flaky retry test in the worker, then run"]}),  # cut at a word
        # the cd prefix is a path, not the command
        ([assistant(tools=[("bash", {"command": "cd /srv/app && npm test 2>&1 | tail -5"})])],
         {"commands": ["npm test"], "paths": ["/srv/app"]}),
        # quoted: a pattern
        ([assistant(tools=[("bash",
                            {"command": "sed -i 's|a/b.ts|c/d.ts|g' src/x.ts > /dev/null"})])],
         {"commands": ["sed -i 's|a/b.ts|c/d.ts|g' src/x.ts"], "paths": ["src/x.ts"]}),
        ([err("\n  Error: ENOENT: no such file, open 'lib/x.js:12:3'\nstack...")],
         {"errors": ["Error: ENOENT: no such file, open 'lib/x.js:12:3'"], "paths": ["lib/x.js"]}),
        ([user("Please fix #123, see https://github.com/o/r/pull/9.\nMore detail")],
         {"requests": ["Please fix #123, see https://github.com/o/r/pull"],  # 48 characters at most
          "identifiers": ["https://github.com/o/r/pull/9", "#123"]}),
        ([{"role": "bashExecution", "command": "git status", "output": "", "exitCode": 0}],
         {"commands": ["git status"]}),
        ([user("ratio 1/2 on 2024/01/02")], {"requests": ["ratio 1/2 on 2024/01/02"]}),
        ([assistant(tools=[("bash", {"command": "echo 1/2 2024/01/02 https://x.io/a/b"})])],
         {"commands": ["echo 1/2 2024/01/02 https://x.io/a/b"]}),  # no letters / a URL: no path
        ([{"role": "toolResult", "isError": False, "content": "fine"}], {}),  # only errors count
    ],
)
def test_extraction(messages: list[dict[str, Any]], expected: dict[str, list[str]]) -> None:
    assert kinds(messages) == expected


def test_long_heads_are_cut_to_a_verbatim_prefix() -> None:
    (fact,) = extract_facts([{"role": "bashExecution", "command": "echo " + "y" * 300}])
    assert fact.text == ("echo " + "y" * 300)[:64]


def test_found_facts_are_counted_and_lost_ones_appended() -> None:
    facts = extract_facts([user("Run   the tests"),
                           assistant(tools=[("bash", {"command": "make test"})])])
    result = apply_ledger(facts, "We were asked to: Run the tests.", 500)
    assert result.stats["requests"] == {"total": 1, "inSummary": 1, "appended": 0, "dropped": 0}
    assert result.stats["commands"] == {"total": 1, "inSummary": 0, "appended": 1, "dropped": 0}
    assert result.block == "\n\n<session-facts>\ncommands:\n- make test\n</session-facts>"
    assert parse_fact_block("S" + result.block) == [("commands", "make test")]
    assert strip_fact_block("S" + result.block) == "S"


def test_budget_keeps_repeated_and_recent_first_and_says_what_did_not_fit() -> None:
    facts = [Fact("commands", f"cmd-{i:03d} " + "z" * 40, 1, i) for i in range(100)]
    facts[3].count = 5  # repeated: kept although old
    budget = 200
    result = apply_ledger(facts, "", budget)
    assert estimate_tokens(result.block) <= budget
    kept = [text for _, text in parse_fact_block(result.block)]
    assert kept[0].startswith("cmd-003") and "cmd-099" in kept[1]  # repeated, then newest
    stats = result.stats["commands"]
    assert stats["appended"] == len(kept) and stats["appended"] + stats["dropped"] == 100
    assert result.block.endswith(
        f"(not kept, no room: {stats['dropped']} commands)\n</session-facts>")


@pytest.mark.parametrize("budget", [0, 3])
def test_no_room_measures_without_a_block(budget: int) -> None:
    result = apply_ledger([Fact("paths", "a/b.py")], "", budget)
    assert result.block == "" and result.stats["paths"]["dropped"] == 1


def test_next_compaction_strips_the_block_and_carries_its_facts() -> None:
    summary = ("S" + "\n\n<session-facts>\npath: x/y.py\n</session-facts>"
               + format_file_operations(["r.py"], []))
    items = [user("a"), {"type": "compaction", "summary": summary, "firstKeptEntryId": "e0",
                         "tokensBefore": 1},
             user(chars(400)), assistant("b")]
    prep = prepare_compaction(chain(*items), CompactionSettings(keep_recent_tokens=10),
                              EstimateTokenizer())
    assert prep is not None and prep.previous_summary == "S"
    assert prep.carried_facts == (("paths", "x/y.py"),)
    ledger = compaction_ledger(prep, "new summary")
    assert parse_fact_block("new summary" + ledger.block)[0] == ("paths", "x/y.py")
    assert strip_fact_block(strip_file_operation_tags(summary)) == "S"


def test_block_is_sectioned_and_earlier_one_line_blocks_still_parse() -> None:
    facts = [Fact("requests", "go on"), Fact("paths", "a/b.py"), Fact("commands", "make test")]
    block = apply_ledger(facts, "", 500).block
    assert block == ("\n\n<session-facts>\npaths:\n- a/b.py\ncommands:\n- make test\n"
                     "requests:\n- go on\n</session-facts>")
    old = ("S\n\n<session-facts>\npath: x/y.py\nrequest: go on\n(not kept, no room: 1 command)\n"
           "</session-facts>")
    assert parse_fact_block(old) == [("paths", "x/y.py"), ("requests", "go on")]


def test_a_fact_inside_another_needs_no_line_and_counts_as_appended() -> None:
    facts = [Fact("commands", "ls"), Fact("commands", "ls -la"), Fact("requests", "ls -la ok")]
    result = apply_ledger(facts, "", 500)
    assert parse_fact_block(result.block) == [("requests", "ls -la ok")]
    assert result.stats["commands"] == {"total": 2, "inSummary": 0, "appended": 2, "dropped": 0}


def test_kept_messages_count_as_found() -> None:
    items = [user("look at https://example.com/a"), assistant(chars(400)),
             user("now read https://example.com/a")]
    prep = prepare_compaction(chain(*items), CompactionSettings(keep_recent_tokens=5),
                              EstimateTokenizer())
    assert prep is not None and prep.kept_entry_ids == ("e2",)
    ledger = compaction_ledger(prep, "summary")
    assert ledger.stats["identifiers"] == {"total": 1, "inSummary": 1, "appended": 0, "dropped": 0}
    assert ledger.stats["requests"]["appended"] == 1


@pytest.mark.parametrize("command", [
    "cat src/a.py | head -5",
    "grep -n 'a b' \"src/x y.ts\" lib/z.ts",
    r'echo "say \"hi\"" > out/log.txt',
    "cd /srv && make test # then look at build/out.log",
    "ls dir/#weird/ x.md",
    "sed -i '' 's|a/b|c/d|g' src/x.ts;git add -A&&git commit -m 'w/ fix'",
    r"printf a\ b/c.txt (sub/d.py)",
])
def test_shell_words_read_as_shlex_does(command: str) -> None:
    import shlex

    from worker.compaction.facts import _shell_words

    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    expected = [w for w in lexer if w and not set(w) <= set("();<>|&")]
    assert _shell_words(command) == expected


@pytest.mark.parametrize(
    ("split", "prefix", "reserve", "budget"),
    [
        (False, (), 16384, 13107),  # the history summary's max tokens (0.8 × reserve)
        (True, ({"role": "user", "content": "q", "timestamp": 1},), 16384, 13107 + 8192),
        (True, (), 16384, 13107),  # a split turn without prefix messages adds no summary
        (True, ({"role": "user", "content": "q", "timestamp": 1},), 1000, 800 + 500),
    ],
)
def test_the_summary_budget_is_that_of_the_text_the_entry_stores(
        split: bool, prefix: tuple[dict[str, Any], ...], reserve: int, budget: int) -> None:
    from dataclasses import replace

    from worker.compaction.ledger import summary_budget

    path = chain(user(chars(400)), assistant(chars(400)), user(chars(400)), assistant(chars(40)))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=20), EstimateTokenizer())
    assert prep is not None
    prep = replace(prep, is_split_turn=split, turn_prefix_messages=prefix,
                   settings=replace(prep.settings, reserve_tokens=reserve))
    assert summary_budget(prep) == budget


@pytest.mark.parametrize("own_tags", [False, True])
def test_a_hooks_summary_gets_the_plans_file_lists_unless_it_wrote_its_own(own_tags: bool) -> None:
    from worker.compaction.ledger import hook_compaction_with_facts

    path = chain(user("fix it"), assistant(tools=[("read", {"path": "src/a.py"})]),
                 user(chars(400)), assistant(chars(400)))
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=150), EstimateTokenizer())
    assert prep is not None and prep.read_files == ("src/a.py",)
    given = "Hook text." + (format_file_operations(["own.py"], []) if own_tags else "")
    summary, details, _ = hook_compaction_with_facts(prep, given, None)
    assert summary.startswith(given)
    assert summary.endswith("<read-files>\nsrc/a.py\n</read-files>") is not own_tags
    paths = details["facts"]["paths"]
    assert (paths["inSummary"], paths["appended"]) == ((0, 1) if own_tags else (1, 0))
    if not own_tags:  # the stored layout: text, block, tags (the next compaction strips both)
        assert strip_file_operation_tags(summary).endswith("</session-facts>")


@pytest.mark.parametrize(("facts", "summary", "kept"), [
    ([], "summary", "kept text"),
    ([Fact("paths", "a/b.py")], "read a/b.py", "kept"),  # in the summary
    ([Fact("paths", "a/b.py")], "summary", "read a/b.py"),  # in the kept text only
    ([Fact("paths", "a/b.py")], "summary", "kept"),  # nowhere
    ([Fact("commands", "make test")], "ran make", "test it"),  # across the join
    ([Fact("commands", "make  test"), Fact("commands", "make test")], "make\ttest", ""),
    ([Fact("paths", "a.py"), Fact("paths", "b.py")], "a.py", "b.py"),
    ([Fact("requests", "")], "", ""),  # an empty text is always found
])
def test_the_kept_text_built_on_demand_finds_what_the_built_one_does(
        facts: list[Fact], summary: str, kept: str) -> None:
    built: list[str] = []

    def on_demand() -> str:
        built.append(kept)
        return kept

    expected = apply_ledger(facts, summary, 500, found_in_normalized=kept)
    assert apply_ledger(facts, summary, 500, found_in_normalized=on_demand) == expected
    in_summary = apply_ledger(facts, summary, 500)
    # built only when the summary alone lacks a fact
    assert bool(built) == (sum(s["inSummary"] for s in in_summary.stats.values()) < len(facts))


@pytest.mark.parametrize(("summary", "built"), [
    ("no facts here", 1), ("asked to look at https://example.com/a", 0)])
def test_a_compaction_normalizes_the_kept_messages_only_when_the_summary_lacks_a_fact(
        monkeypatch: pytest.MonkeyPatch, summary: str, built: int) -> None:
    import worker.compaction.ledger as ledger

    calls: list[int] = []
    normalize = ledger.normalized_conversation

    def counted(*args: Any) -> str:
        calls.append(1)
        return normalize(*args)

    monkeypatch.setattr(ledger, "normalized_conversation", counted)
    items = [user("look at https://example.com/a"), assistant(chars(400)), user("go on")]
    prep = prepare_compaction(chain(*items), CompactionSettings(keep_recent_tokens=5),
                              EstimateTokenizer())
    assert prep is not None
    compaction_ledger(prep, summary)
    assert len(calls) == built
