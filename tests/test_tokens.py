import pytest

from helpers.sessions import assistant, chars, tool_result, user
from worker.tokens import EstimateTokenizer, TiktokenTokenizer, get_tokenizer

IMAGE = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
EST = EstimateTokenizer()


@pytest.mark.parametrize(
    ("message", "tokens"),
    [
        (user(chars(9)), 3),
        ({"role": "user", "content": [{"type": "text", "text": chars(8)}, IMAGE]}, 2),  # images count 0 for users
        ({"role": "user", "content": 42}, 0),
        (assistant(chars(3), tools=[("read", {"path": "a"})]), 5),  # 3 + len("read") + len('{"path":"a"}')=12 -> ceil(19/4)
        ({"role": "assistant", "content": [{"type": "thinking", "thinking": chars(8)}]}, 2),
        (tool_result(chars(4)), 1),
        ({"role": "toolResult", "content": [IMAGE]}, 1200),
        ({"role": "toolResult", "content": "abcde"}, 2),
        ({"role": "bashExecution", "command": "ls", "output": chars(6)}, 2),
        ({"role": "bashExecution", "command": "ls", "output": chars(6), "excludeFromContext": True}, 2),
        ({"role": "compactionSummary", "summary": chars(40)}, 10),
        ({"role": "branchSummary", "summary": chars(41)}, 11),
        # Q1: custom counts its converted text; an image 4800 chars.
        ({"role": "custom", "customType": "t", "content": chars(16), "display": True}, 4),
        ({"role": "custom", "customType": "t", "content": [IMAGE], "display": True}, 1200),
        ({"role": "hookMessage", "customType": "t", "content": chars(16)}, 4),
        ({"role": "pythonExecution", "code": "x", "output": "", "exitCode": 0, "excludeFromContext": True}, 0),
        # "Ran Python:\n```python\nx\n```\n(no output)" = 38 chars -> 10
        ({"role": "pythonExecution", "code": "x", "output": "", "exitCode": 0}, 10),
        ({"role": "unknownRole", "content": chars(100)}, 0),
        ({"role": "user", "content": "😀😀"}, 1),  # 4 UTF-16 units
    ],
)
def test_estimate(message: dict, tokens: int) -> None:
    assert EST.count(message) == tokens


def test_tiktoken_counts_cl100k_offline() -> None:
    tok = TiktokenTokenizer()
    assert tok.count(user("hello world")) == 2
    assert tok.count({"role": "toolResult", "content": [IMAGE]}) == 1200


def test_tiktoken_cache_reuses_counts_of_old_text(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = TiktokenTokenizer()
    text = "some tool output " * 200
    first = tok.count(tool_result(text))

    def no_encoding() -> None:
        raise AssertionError("old text was tokenized again")

    monkeypatch.setattr(tok, "encoding", no_encoding)
    assert tok.count(tool_result(str(text))) == first  # an equal string from a fresh snapshot


def test_get_tokenizer_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("bpe")
    assert get_tokenizer("estimate") is get_tokenizer("estimate")
