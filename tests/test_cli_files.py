"""``compactor session migrate`` and ``compactor inspect ...`` over files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.sessions import assistant, chain, chars, session, tool_result, user
from worker.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(tmp_path: Path) -> Path:
    entries = chain(user(chars(400)), assistant(chars(400), tools=[("edit", {"path": "/a.py"})]), tool_result("ok", "edit"),
                    user(chars(400)), assistant(chars(400)),
                    {"type": "message", "message": user("side"), "parentId": "e1", "id": "s1", "timestamp": "2026-01-02T00:00:00.000Z"})
    path = tmp_path / "small.jsonl"
    path.write_text(session(entries).to_jsonl())
    return path


def test_plan_json_has_the_contract_keys(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    code, out, _ = run(capsys, "inspect", "plan", str(small), "--leaf", "e4", "--keep-recent-tokens", "150", "--tokenizer", "estimate", "--json")
    plan = json.loads(out)
    assert code == 0 and out.count("\n") == 1
    assert plan == {
        "firstKeptEntryId": "e3", "firstKeptEntryIndex": 3, "turnStartIndex": -1, "isSplitTurn": False,
        "tokensBefore": 0, "keepRecentTokens": 150, "summarizeEntryIds": ["e0", "e1", "e2"],
        "turnPrefixEntryIds": [], "keptEntryIds": ["e3", "e4"], "hasPreviousSummary": False,
        "readFiles": [], "modifiedFiles": ["/a.py"],
    }


def test_context_prune_branch_and_prompt(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    _, out, _ = run(capsys, "inspect", "context", str(small), "--json")
    context = json.loads(out)
    assert context["messages"] == [{"role": "user", "entryId": "e0"}, {"role": "assistant", "entryId": "e1"},
                                   {"role": "user", "entryId": "s1"}]
    assert (context["thinkingLevel"], context["mode"], context["models"]) == ("off", "none", {"default": "p/m"})
    _, out, _ = run(capsys, "inspect", "prune", str(small), "--json")
    assert json.loads(out) == {"prunedCount": 0, "tokensSaved": 0, "prunedEntryIds": []}
    _, out, _ = run(capsys, "inspect", "branch", str(small), "--from", "e4", "--to", "s1", "--json", "--tokenizer", "estimate")
    branch = json.loads(out)
    assert branch["commonAncestorId"] == "e1" and branch["collectedEntryIds"] == ["e2", "e3", "e4"]
    assert branch["includedEntryIds"] == ["e3", "e4"] and branch["totalTokens"] == 200
    code, out, _ = run(capsys, "inspect", "prompt", str(small), "--kind", "branch", "--leaf", "e4", "--to", "s1", "--instructions", "only X")
    assert code == 0 and out.startswith("=== system ===") and out.rstrip().endswith("only X")


def test_migrate_prints_v3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    v1 = tmp_path / "v1.jsonl"
    v1.write_text('{"type":"session","id":"x","timestamp":"t","cwd":"/"}\n{"type":"message","timestamp":"t","message":{"role":"user","content":"a"}}\n')
    code, out, _ = run(capsys, "session", "migrate", str(v1))
    header, entry = (json.loads(x) for x in out.splitlines())
    assert code == 0 and header["version"] == 3 and entry["parentId"] is None and len(entry["id"]) == 8


def test_already_compacted_plan_is_null(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(session(chain(user("a"), {"type": "compaction", "summary": "s", "firstKeptEntryId": "e0", "tokensBefore": 1})).to_jsonl())
    _, out, _ = run(capsys, "inspect", "plan", str(path), "--json")
    assert json.loads(out) == {"plan": None, "reason": "already compacted"}


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"type":"message"}\n', [], "first line is not a session header"),
        ('{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":"b","timestamp":"t","message":{"role":"user","content":"x"}}\n{"type":"message","id":"b","parentId":"a","timestamp":"t","message":{"role":"user","content":"x"}}\n', [], ":3: parentId cycle"),
        ('{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":"a","timestamp":"t","message":{"role":"user","content":"x"}}\n', [], ":2: parentId cycle: entry a is its own parent"),
        ('{"type":"session","id":"s","vers\n{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}\n', [], ":1: first line is not a session header: it is not JSON"),
        ('{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":"ghost","timestamp":"t","message":{"role":"user","content":"x"}}\n', [], ":2: entry a has parentId 'ghost'"),
        ('{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}\n', ["--leaf", "nope"], "leaf entry 'nope' does not exist"),
        ('{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":5}}\n', [], ":2: message has no string 'role'"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, args: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    code, out, err = run(capsys, "inspect", "plan", str(path), "--json", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_and_broken_line_over_a_real_process(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "worker", "inspect", "prune", str(tmp_path / "none.jsonl")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "none.jsonl: cannot read file" in result.stderr and "Traceback" not in result.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type":"session","id":"s","version":3}\n{oops\n{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}\n')
    result = subprocess.run([sys.executable, "-m", "worker", "inspect", "context", str(broken), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "broken.jsonl:2: skipped a line" in result.stderr
    assert json.loads(result.stdout)["messages"] == [{"role": "user", "entryId": "a"}]


@pytest.mark.fixtures
@pytest.mark.parametrize("command", [["inspect", "plan"], ["inspect", "prune"], ["inspect", "context"], ["session", "migrate"]])
def test_every_command_works_on_the_reference_sessions(capsys: pytest.CaptureFixture[str], pi_file: Path, command: list[str]) -> None:
    json_flag = ["--json", "--tokenizer", "estimate"] if command[1] in ("plan", "prune") else (["--json"] if command[1] == "context" else [])
    code, out, _ = run(capsys, *command, str(pi_file), *json_flag)
    assert code == 0
    if json_flag:
        assert isinstance(json.loads(out), dict)
    else:
        assert len(out.splitlines()) == len([x for x in pi_file.read_text().splitlines() if x.strip()])


def test_plan_keeps_a_tool_call_with_its_result(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Q22: a compaction committed while the tool ran; the tool's large result came after it.
    call = assistant(tools=[("bash", {"command": "make test"})])
    entries = chain(user(chars(400)), call, {"type": "compaction", "summary": "s", "firstKeptEntryId": "e0",
                                             "tokensBefore": 1}, tool_result(chars(90_000)))
    path = tmp_path / "q22.jsonl"
    path.write_text(session(entries).to_jsonl())
    _, out, _ = run(capsys, "inspect", "plan", str(path), "--json", "--tokenizer", "estimate")
    plan = json.loads(out)
    assert (plan["firstKeptEntryId"], plan["keptEntryIds"], plan["turnPrefixEntryIds"]) == ("e1", ["e1", "e3"], ["e0"])


def test_a_line_separator_inside_a_string_is_not_a_line_break(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    entries = chain(user("one\u2028two\u2029three\x85four"), assistant("ok"))
    path = tmp_path / "sep.jsonl"
    path.write_text(session(entries).to_jsonl(), encoding="utf-8")
    code, out, err = run(capsys, "inspect", "context", str(path), "--json")
    assert code == 0 and err == ""
    assert [m["entryId"] for m in json.loads(out)["messages"]] == ["e0", "e1"]
