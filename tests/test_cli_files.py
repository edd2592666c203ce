"""``compactor session migrate`` and ``compactor inspect ...`` over files."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.sessions import assistant, chain, chars, session, tool_result, user
from worker.cli import build_parser, main
from worker.cli.celery_commands import celery_worker_help, flower_help


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(tmp_path: Path) -> Path:
    entries = chain(user(chars(400)), assistant(chars(400), tools=[("edit", {"path": "/a.py"})]),
                    tool_result("ok", "edit"),
                    user(chars(400)), assistant(chars(400)),
                    {"type": "message", "message": user("side"), "parentId": "e1", "id": "s1",
                     "timestamp": "2026-01-02T00:00:00.000Z"})
    path = tmp_path / "small.jsonl"
    path.write_text(session(entries).to_jsonl())
    return path


def test_plan_json_has_the_contract_keys(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    code, out, _ = run(capsys, "inspect", "plan", str(small), "--leaf", "e4",
                       "--keep-recent-tokens", "150", "--tokenizer", "estimate", "--json")
    plan = json.loads(out)
    assert code == 0 and out.count("\n") == 1
    assert plan == {
        "firstKeptEntryId": "e3", "firstKeptEntryIndex": 3, "turnStartIndex": -1,
        "isSplitTurn": False,
        "tokensBefore": 0, "keepRecentTokens": 150, "summarizeEntryIds": ["e0", "e1", "e2"],
        "turnPrefixEntryIds": [], "keptEntryIds": ["e3", "e4"], "hasPreviousSummary": False,
        "readFiles": [], "modifiedFiles": ["/a.py"],
    }


def test_context_prune_branch_and_prompt(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    _, out, _ = run(capsys, "inspect", "context", str(small), "--json")
    context = json.loads(out)
    assert context["messages"] == [{"role": "user", "entryId": "e0"},
                                   {"role": "assistant", "entryId": "e1"},
                                   {"role": "user", "entryId": "s1"}]
    assert (context["thinkingLevel"], context["mode"], context["models"]) == (
        "off", "none", {"default": "p/m"})
    _, out, _ = run(capsys, "inspect", "prune", str(small), "--json")
    assert json.loads(out) == {"prunedCount": 0, "tokensSaved": 0, "prunedEntryIds": []}
    _, out, _ = run(capsys, "inspect", "branch", str(small), "--from", "e4", "--to", "s1", "--json",
                    "--tokenizer", "estimate")
    branch = json.loads(out)
    assert branch["commonAncestorId"] == "e1" and branch["collectedEntryIds"] == ["e2", "e3", "e4"]
    assert branch["includedEntryIds"] == ["e3", "e4"] and branch["totalTokens"] == 200
    code, out, _ = run(capsys, "inspect", "prompt", str(small), "--kind", "branch", "--leaf", "e4",
                       "--to", "s1", "--instructions", "only X")
    assert code == 0 and out.startswith("=== system ===") and out.rstrip().endswith("only X")


def test_migrate_prints_v3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    v1 = tmp_path / "v1.jsonl"
    v1.write_text('{"type":"session","id":"x","timestamp":"t","cwd":"/"}\n'
                  '{"type":"message","timestamp":"t","message":{"role":"user","content":"a"}}\n')
    code, out, _ = run(capsys, "session", "migrate", str(v1))
    header, entry = (json.loads(x) for x in out.splitlines())
    assert (code == 0 and header["version"] == 3 and entry["parentId"] is None
            and len(entry["id"]) == 8)


def test_already_compacted_plan_is_null(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(session(chain(user("a"), {"type": "compaction", "summary": "s",
                                              "firstKeptEntryId": "e0",
                                              "tokensBefore": 1})).to_jsonl())
    _, out, _ = run(capsys, "inspect", "plan", str(path), "--json")
    assert json.loads(out) == {"plan": None, "reason": "already compacted"}


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"type":"message"}\n', [], "first line is not a session header"),
        ('{"type":"session","id":"s","version":3}\n'
         '{"type":"message","id":"a","parentId":"b","timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n'
         '{"type":"message","id":"b","parentId":"a","timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n',
         [], ":3: parentId cycle"),
        ('{"type":"session","id":"s","version":3}\n'
         '{"type":"message","id":"a","parentId":"a","timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n',
         [], ":2: parentId cycle: entry a is its own parent"),
        ('{"type":"session","id":"s","vers\n'
         '{"type":"message","id":"a","parentId":null,"timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n',
         [], ":1: first line is not a session header: it is not JSON"),
        ('{"type":"session","id":"s","version":3}\n'
         '{"type":"message","id":"a","parentId":"ghost","timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n',
         [], ":2: entry a has parentId 'ghost'"),
        ('{"type":"session","id":"s","version":3}\n'
         '{"type":"message","id":"a","parentId":null,"timestamp":"t",'
         '"message":{"role":"user","content":"x"}}\n',
         ["--leaf", "nope"], "leaf entry 'nope' does not exist"),
        ('{"type":"session","id":"s","version":3}\n'
         '{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":5}}\n',
         [], ":2: message has no string 'role'"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      content: str, args: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    code, out, err = run(capsys, "inspect", "plan", str(path), "--json", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_and_broken_line_over_a_real_process(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "worker", "inspect", "prune",
                             str(tmp_path / "none.jsonl")],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode == 2 and "none.jsonl: cannot read file" in result.stderr
            and "Traceback" not in result.stderr)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type":"session","id":"s","version":3}\n{oops\n'
                      '{"type":"message","id":"a","parentId":null,"timestamp":"t",'
                      '"message":{"role":"user","content":"x"}}\n')
    result = subprocess.run([sys.executable, "-m", "worker", "inspect", "context", str(broken),
                             "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "broken.jsonl:2: skipped a line" in result.stderr
    assert json.loads(result.stdout)["messages"] == [{"role": "user", "entryId": "a"}]


@pytest.mark.fixtures
@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "plan"],
        ["inspect", "prune"],
        ["inspect", "context"],
        ["session", "migrate"],
    ],
)
def test_every_command_works_on_the_reference_sessions(capsys: pytest.CaptureFixture[str],
                                                       pi_file: Path, command: list[str]) -> None:
    json_flag = (["--json", "--tokenizer", "estimate"] if command[1] in ("plan", "prune")
                 else (["--json"] if command[1] == "context" else []))
    code, out, _ = run(capsys, *command, str(pi_file), *json_flag)
    assert code == 0
    if json_flag:
        assert isinstance(json.loads(out), dict)
    else:
        assert len(out.splitlines()) == len([x for x in pi_file.read_text().splitlines()
                                             if x.strip()])


def test_plan_keeps_a_tool_call_with_its_result(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    # Q22: a compaction committed while the tool ran; the tool's large result came after it.
    call = assistant(tools=[("bash", {"command": "make test"})])
    entries = chain(user(chars(400)), call, {"type": "compaction", "summary": "s",
                                             "firstKeptEntryId": "e0", "tokensBefore": 1},
                    tool_result(chars(90_000)))
    path = tmp_path / "q22.jsonl"
    path.write_text(session(entries).to_jsonl())
    _, out, _ = run(capsys, "inspect", "plan", str(path), "--json", "--tokenizer", "estimate")
    plan = json.loads(out)
    assert (plan["firstKeptEntryId"], plan["keptEntryIds"], plan["turnPrefixEntryIds"]) == (
        "e1", ["e1", "e3"], ["e0"])


def test_a_line_separator_inside_a_string_is_not_a_line_break(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    entries = chain(user("one\u2028two\u2029three\x85four"), assistant("ok"))
    path = tmp_path / "sep.jsonl"
    path.write_text(session(entries).to_jsonl(), encoding="utf-8")
    code, out, err = run(capsys, "inspect", "context", str(path), "--json")
    assert code == 0 and err == ""
    assert [m["entryId"] for m in json.loads(out)["messages"]] == ["e0", "e1"]


def _parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the command tree with its command path (``compactor inspect plan``)."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_command_and_option_has_help() -> None:
    missing = []
    for prog, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {choice.dest for choice in action._choices_actions}
                missing += [f"{prog} {name}" for name in action.choices if name not in listed]
                missing += [f"{prog} {c.dest}" for c in action._choices_actions if not c.help]
            elif not (action.help or "").strip():
                missing.append(f"{prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
    progs = {prog for prog, _ in _parsers(build_parser())}
    assert {"compactor inspect plan", "compactor session import", "compactor worker"} <= progs


def _string_constants(path: Path) -> Iterator[str]:
    """String literals of a module except docstrings (comments and docstrings are for us)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield node.value


def test_user_facing_text_cites_no_spec_sections() -> None:
    texts = [parser.format_help() for _, parser in _parsers(build_parser())]
    texts += [celery_worker_help(), flower_help()]
    assert [t for t in texts if "§" in t or "SPEC" in t] == []
    assert any("--redis-url URL" in t for t in texts)
    root = Path(__file__).resolve().parents[1] / "worker"
    for path in sorted((root / "cli").glob("*.py")):  # the demo's output too (cli/demo.py)
        assert [s for s in _string_constants(path) if "§" in s or "SPEC" in s] == [], path.name


@pytest.mark.parametrize(("command", "ours", "theirs"), [
    ("worker", "usage: compactor worker", ["--concurrency", "--prefetch-multiplier", "--pool"]),
    ("flower", "usage: compactor flower", ["--basic-auth", "--port", "--url-prefix"]),
])
def test_worker_and_flower_help_show_the_tools_own_options(command: str, ours: str,
                                                          theirs: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "worker", command, "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith(ours)
    tool_part = result.stdout.split("options (accepted after", 1)[1]
    assert all(option in tool_part for option in theirs)
    # Flower's default cookie secret is random per process: never printed
    assert "secure cookie secret (default" not in result.stdout
