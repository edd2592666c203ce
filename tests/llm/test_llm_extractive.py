"""The deterministic no-LLM summarizer: the sections of docs/compaction.md "Summary formats" from
the conversation itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
from llm.llm_fakes import make_request

from worker.llm.providers.extractive import extractive_summary


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 0}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "stopReason": "toolUse", "timestamp": 0,
            "content": [{"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}]}


def result(call_id: str, name: str, text: str, is_error: bool = False) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name, "isError": is_error,
            "content": [{"type": "text", "text": text}], "timestamp": 0}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "stopReason": "stop", "timestamp": 0,
            "content": [{"type": "text", "text": text}]}


SESSION = [
    user("Fix the CSV importer in src/importer.py so that it handles quoted commas. "
         "Do not change the public API."),
    call("c1", "read", path="src/importer.py"),
    result("c1", "read", "def parse(line): ..."),
    call("c2", "bash", command="pytest -q tests/test_importer.py"),
    result("c2", "bash", "FAILED tests/test_importer.py::test_quotes - AssertionError",
           is_error=True),
    call("c3", "edit", path="src/importer.py", oldText="a", newText="b"),
    result("c3", "edit", "ok"),
    say("The importer now uses the csv module."),
    user("Now add a test for empty lines\nand keep the style of the existing tests."),
]


def summarize(conversation: Any, purpose: str = "history", **kwargs: Any) -> str:
    request = make_request(conversation, purpose=purpose, **kwargs)
    return extractive_summary(request)


def headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_history_sections() -> None:
    text = summarize(SESSION)
    assert headings(text) == ["## Goal", "## Constraints & Preferences", "## Progress", "### Done",
                              "### In Progress", "### Blocked", "## Next Steps",
                              "## Critical Context"]
    assert "- Fix the CSV importer in src/importer.py so that it handles quoted commas." in text
    assert "- Do not change the public API." in text  # a constraint sentence
    assert "- [x] `read` src/importer.py" in text
    assert ("- [x] `bash` pytest -q tests/test_importer.py — failed: "
            "FAILED tests/test_importer.py::test_quotes" in text)
    assert "- [ ] Now add a test for empty lines" in text  # the open request
    assert "bash pytest -q tests/test_importer.py: FAILED" in text  # the error seen, under Blocked
    assert "1. Continue with: Now add a test for empty lines" in text
    # modified wins
    assert "- Files modified: `src/importer.py`" in text and "Files read" not in text
    # the last open request, verbatim (every line)
    assert ("- Pending request (verbatim):\n> Now add a test for empty lines\n> and keep the style"
            in text)


def test_answered_requests_are_not_pending() -> None:
    text = summarize(SESSION[:-1])
    assert "Pending request" not in text and "### In Progress" not in text


def test_a_closing_question_is_kept_verbatim() -> None:
    text = summarize([*SESSION[:-1], say("Shall I also update the README?")])
    assert "> Shall I also update the README?" in text
    assert "1. Wait for the user's answer to: Shall I also update the README?" in text


def test_request_file_lists_are_used() -> None:
    text = extractive_summary(_with_files(SESSION, ("docs/a.md",), ("src/b.py",)))
    assert "- Files modified: `src/b.py`, `src/importer.py`" in text
    assert "- Files read: `docs/a.md`" in text


def _with_files(conversation: Any, read: tuple[str, ...], modified: tuple[str, ...]) -> Any:
    from dataclasses import replace

    return replace(make_request(conversation), read_files=read, modified_files=modified)


def test_merge_with_previous_summary() -> None:
    previous = summarize(SESSION)
    later = [user("Please also support semicolon separated files from Excel exports"),
             call("c9", "write", path="src/dialects.py", content="x"), result("c9", "write", "ok")]
    text = summarize(later, previous=previous)
    goals = text.split("## Goal\n")[1].split("\n\n")[0]
    # old goals kept, new added
    assert "Fix the CSV importer" in goals and "semicolon separated" in goals
    # in progress before a newer request: done
    assert "- [x] Now add a test for empty lines" in text
    assert "- [x] `read` src/importer.py" in text and "- [x] `write` src/dialects.py" in text
    assert "> Now add a test" not in text  # the old pending request was replaced
    assert "> Please also support semicolon separated files" in text
    assert text.count("- Files modified:") == 1 and "`src/dialects.py`" in text


def test_embedded_compaction_summary_is_merged_not_taken_as_a_goal() -> None:
    wrapped = ("The conversation history before this point was compacted.\n\n<summary>\n"
               "## Goal\n- Migrate the build to hatch\n</summary>")
    text = summarize([user(wrapped), *SESSION])
    assert "- Migrate the build to hatch" in text
    assert "compacted" not in text


@pytest.mark.parametrize("previous", [None, "Free text summary without any headings."])
def test_free_text_previous_summary_is_kept(previous: str | None) -> None:
    text = summarize(SESSION, previous=previous)
    assert ("## Additional Notes\nFree text summary" in text) is (previous is not None)


def test_large_input_gives_a_small_deterministic_output() -> None:
    big: list[dict[str, Any]] = []
    for i in range(400):
        big += [user(f"Step {i}: refactor module_{i}.py to use the new API " + "please " * 50),
                call(f"r{i}", "read", path=f"src/module_{i}.py"),
                result(f"r{i}", "read", "x" * 5000),
                call(f"e{i}", "edit", path=f"src/module_{i}.py"),
                result(f"e{i}", "edit", "y" * 2000, i % 7 == 0)]
    size = sum(len(str(m)) for m in big)
    first, second = summarize(big), summarize(big)
    assert first == second
    assert size > 2_000_000 and len(first) < 20_000
    assert ("earlier items omitted" in first and "`src/module_0.py`" in first
            and "and 380 more" in first)


def test_short_summary_is_one_to_three_first_person_sentences() -> None:
    text = summarize(SESSION, purpose="short", previous=summarize(SESSION))
    sentences = [s for s in re.split(r"(?<=\.)\s+", text) if s]
    assert 1 <= len(sentences) <= 3 and "?" not in text
    assert text.startswith("I worked on: Fix the CSV importer in src/importer.py so that it "
                           "handles quoted commas.")
    assert "I changed src/importer.py." in text


def test_short_summary_without_anything() -> None:
    assert summarize([], purpose="short") == (
        "I worked on: the requested task. I made no file changes.")


def test_turn_prefix_sections() -> None:
    text = summarize(SESSION[:5], purpose="turn_prefix")
    assert headings(text) == ["## Original Request", "## Early Progress", "## Context for Suffix"]
    assert text.split("\n")[1].startswith("Fix the CSV importer")
    assert "- `bash` pytest -q tests/test_importer.py — failed" in text
    assert "- Files read: `src/importer.py`" in text


def test_branch_sections_are_all_present() -> None:
    text = summarize(SESSION[:3], purpose="branch")
    assert headings(text) == ["## Goal", "## Constraints & Preferences", "## Progress", "### Done",
                              "### In Progress", "### Blocked", "## Key Decisions", "## Next Steps"]
    assert "### Blocked\n- (none)" in text and "## Key Decisions\n- (none recorded)" in text


def test_odd_messages_do_not_break_it() -> None:
    odd: list[Any] = [{"role": "user"}, {"role": "assistant", "content": "not a list"},
                      {"role": "toolResult"}, {"role": "bashExecution"},
                      {"role": "assistant", "content": [None, {"type": "toolCall"}]},
                      user("Ran `make test`\n```\nboom\n```\n\nCommand exited with code 2")]
    text = summarize(odd)
    assert "`user command` `make test`" in text and "Command exited with code 2" in text


def _busy_session(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out += [user(f"Request {i}: make the parser accept dialect number {i}" if i % 3 else "ok"),
                call(f"r{i}", "read", path=f"src/dialect_{i}.py"),
                result(f"r{i}", "read", "x" * 400),
                call(f"b{i}", "bash", command="cd /repo/packages/parser && pytest -q "
                                              f"tests/test_dialect_{i}.py 2>&1 | tail -5"),
                result(f"b{i}", "bash", f"E   AssertionError: dialect {i} rejected\nmore",
                       is_error=i % 2 == 0)]
    return out


def test_every_request_command_and_error_is_kept_under_the_budget() -> None:
    text = summarize(_busy_session(60), max_tokens=13_107)
    for i in range(60):
        if i % 3:
            assert f"- Request {i}: make the parser accept dialect number {i}" in text
        assert f"pytest -q tests/test_dialect_{i}.py" in text
        if i % 2 == 0:
            assert f"E   AssertionError: dialect {i} rejected" in text
    assert "- Other user messages: `ok`" in text  # short replies, once, on one line
    assert "omitted" not in text


def test_over_the_budget_file_steps_go_first_then_the_oldest() -> None:
    text = summarize(_busy_session(200), max_tokens=3_000)
    done = text.split("### Done\n")[1].split("\n\n")[0]
    assert "`read`" not in done and "earlier items omitted" in done  # paths are in the file lists
    assert "pytest -q tests/test_dialect_199.py" in done and "tests/test_dialect_0.py" not in done
    assert len(done) <= 0.45 * 6_000 + 300
