import pytest

from api_client.contract.session.convert import (
    convert_message,
    wrap_branch_summary,
    wrap_compaction_summary,
)
from worker.compaction.prompts import branch_context_intro, compaction_context_intro


def _text(message: dict) -> str:
    return message["content"][0]["text"]


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ({"role": "bashExecution", "command": "ls", "output": "a\nb", "exitCode": 0},
         "Ran `ls`\n```\na\nb\n```"),
        ({"role": "bashExecution", "command": "ls", "output": "", "exitCode": None},
         "Ran `ls`\n(no output)"),
        ({"role": "bashExecution", "command": "x", "output": "o", "exitCode": 2},
         "Ran `x`\n```\no\n```\n\nCommand exited with code 2"),
        ({"role": "bashExecution", "command": "x", "output": "", "exitCode": 2, "cancelled": True},
         "Ran `x`\n(no output)\n\n(command cancelled)"),
        ({"role": "pythonExecution", "code": "1+1", "output": "2", "exitCode": 0},
         "Ran Python:\n```python\n1+1\n```\nOutput:\n```\n2\n```"),
        ({"role": "pythonExecution", "code": "x", "output": "", "exitCode": 1},
         "Ran Python:\n```python\nx\n```\n(no output)\n\nExecution failed with code 1"),
        ({"role": "custom", "customType": "t", "content": "hi", "display": False}, "hi"),
        ({"role": "fileMention", "files": [{"path": "a.py", "content": "x=1"}, {"path": "b"}]},
         '<system-reminder>\n<file path="a.py">\nx=1\n</file>\n\n'
         '<file path="b">\n</file>\n</system-reminder>'),
    ],
)
def test_converted_user_text(message: dict, text: str) -> None:
    converted = convert_message(message)
    assert converted is not None and converted["role"] == "user"
    assert _text(converted) == text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([{"type": "text", "text": "a"}, {"type": "image", "data": "x", "mimeType": "i"},
          {"type": "text", "text": "b"}], "ab"),
        ([{"type": "image", "data": "x", "mimeType": "i"}], "[Output truncated]"),
    ],
)
def test_pruned_tool_result_is_one_text_block(content: list, expected: str) -> None:
    result = convert_message({"role": "toolResult", "content": content, "prunedAt": None})
    assert result is not None and result["content"] == [{"type": "text", "text": expected}]


def test_unpruned_tool_result_keeps_images_and_excluded_runs_are_dropped() -> None:
    content = [{"type": "image", "data": "x", "mimeType": "i"}]
    assert convert_message(  # type: ignore[index]
        {"role": "toolResult", "content": content})["content"] == content
    assert convert_message({"role": "bashExecution", "command": "x", "output": "",
                            "excludeFromContext": True}) is None


def test_wrappers_insert_summaries_verbatim() -> None:
    summary = "  - item\n\n\n\nend  "  # Q9: no whitespace normalisation
    assert wrap_compaction_summary(summary) == (
        f"{compaction_context_intro()}\n\n<summary>\n{summary}\n</summary>")
    assert wrap_branch_summary("s") == f"{branch_context_intro()}\n\n<summary>\ns\n</summary>"
