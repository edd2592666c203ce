"""A summary prompt counted part by part (``TiktokenTokenizer.count_joined``): exact, and a
grown session's prompt costs its new parts."""

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_tokens import _ALPHABET

from api_client.contract.session import load_session
from helpers.sessions import chain, tool_result, user
from worker.compaction import CompactionSettings, compact, prepare_compaction
from worker.compaction.summarize import RequestOptions, history_request
from worker.llm.chunking import RequestCounter
from worker.summary_requests import SummaryRequest, SummaryResult, Usage
from worker.tokens import TiktokenTokenizer, TokenCache, get_tokenizer
from worker.tokens import cache as token_cache

ENCODE = TiktokenTokenizer.encoding().encode_ordinary
SEP = "\n\n"
BIG = "[Tool result]: " + "".join(f"line {i}: x = {i * 7}\n" for i in range(40))


@pytest.mark.parametrize(
    ("head", "parts", "separator", "tail"),
    [
        ("<conversation>\n", ["[User]: hi", "[Assistant]: hello"], SEP, "\n</conversation>\n\nGo."),
        ("", ["[User]: hi", "[Assistant]: hello"], SEP, ""),  # nothing around the parts
        ("<c>\n", ["[User]: one"], SEP, "\n</c>"),  # a single part
        ("<c>\n", ["[User]: a\n[not a label] b\n<tag>", BIG, "[User]: end\n"], SEP, "\n</c>\n"),
        ("<c>\n", [BIG, BIG, BIG], SEP, "\n[Tail]: after"),  # a tail that starts with "["
        ("<c>\n", ["[User]: ends in spaces  ", "[User]:\n\n\n"], SEP, "\n</c>"),
        ("<c>\n", ["[User]: 😀 é\u0301 中", "[User]: 42²"], SEP, "\n</c>"),
        # Not cut where segments() cuts: counted whole, still exact.
        ("<c>", ["[User]: head without a line end"], SEP, "\n</c>"),
        ("<c>\n", ["User: no bracket", "[User]: b"], SEP, "\n</c>"),
        ("<c>\n", ["[User]: a", "[User]: b"], " | ", "\n</c>"),  # separator ends no line
        ("<c>\n", ["[User]: a", "[User]: b"], SEP, " trailing words"),  # tail starts no line
        ("<c>\n", [], SEP, "\n</c>"),  # no parts
    ],
)
def test_a_joined_text_counts_as_the_whole_text(head: str, parts: list[str], separator: str,
                                                tail: str) -> None:
    whole = head + separator.join(parts) + tail
    tok = TiktokenTokenizer(TokenCache())
    assert tok.count_joined(head, parts, separator, tail) == len(ENCODE(whole))
    assert tok.count_joined(head, parts, separator, tail) == len(ENCODE(whole))  # from the memo


@pytest.mark.parametrize("seed", range(6))
def test_generated_parts_count_as_their_joined_text(seed: int) -> None:
    # Parts of every kind of character that decides where cl100k's pattern cuts, long and
    # short, joined under the real prompt's head and tail: 150 texts per seed.
    rng = random.Random(seed)
    tok = TiktokenTokenizer(TokenCache())

    def text(low: int, high: int) -> str:
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(low, high)))

    for _ in range(150):
        parts = [f"[{rng.choice(['User', 'Tool result'])}]: {text(0, 600)}"
                 for _ in range(rng.randint(1, 6))]
        tail = rng.choice(["\n</conversation>\n\n" + text(0, 80), "", "\n[x]" + text(0, 20)])
        whole = "<conversation>\n" + SEP.join(parts) + tail
        assert tok.count_joined("<conversation>\n", parts, SEP, tail) == len(ENCODE(whole))


def test_one_part_object_under_two_separators_has_two_counts() -> None:
    tok = TiktokenTokenizer(TokenCache())
    parts = ["[User]: " + "word " * 100, "[User]: b"]
    for separator in (SEP, "\n", "\n\n\n\n"):
        whole = "<c>\n" + separator.join(parts) + "\n</c>"
        assert tok.count_joined("<c>\n", parts, separator, "\n</c>") == len(ENCODE(whole))


def _requests(path: list[Any]) -> list[SummaryRequest]:
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=4_000),
                              get_tokenizer("estimate"))
    assert prep is not None
    seen: list[SummaryRequest] = []

    class Recorder:
        def summarize(self, request: SummaryRequest, cancel: Any = None) -> SummaryResult:
            seen.append(request)
            return SummaryResult("summary", "m", "p", Usage(), 1)

    compact(prep, Recorder())
    return seen


def test_the_reference_prompts_count_by_their_parts_exactly(pi_file: Path) -> None:
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    requests = _requests(list(tree.path_to(tree.leaf_id)))
    counter = RequestCounter(TiktokenTokenizer(TokenCache()))
    for request in requests:
        assert request.layout is not None and request.layout.prompt is request.prompt
        exact = len(ENCODE(request.system_prompt)) + len(ENCODE(request.prompt))
        assert counter.request(request) == exact
        # A copy with another prompt keeps the old layout: it is counted from its text.
        changed = replace(request, prompt=request.prompt + " and one more line")
        assert counter.request(changed) == (len(ENCODE(changed.system_prompt))
                                            + len(ENCODE(changed.prompt)))


def test_a_grown_prompt_digests_only_its_new_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The old parts are the same objects in the grown prompt: their counts are lookups. Before,
    # the whole prompt was cut and every piece digested again.
    path = chain(*[{"type": "message", "id": f"m{i}", "message": m} for i, m in enumerate(
        [user(f"question {i}: " + "why " * 60) if i % 2 == 0 else tool_result(BIG + str(i))
         for i in range(300)])])
    counter = RequestCounter(TiktokenTokenizer(TokenCache()))
    opts = RequestOptions(None, None, (), 16_384, (), ())
    llm = [e.message for e in path]
    first = history_request(llm, None, opts)
    assert counter.request(first) == len(ENCODE(first.system_prompt)) + len(ENCODE(first.prompt))
    grown = history_request([*llm, user("[new] and what now? " * 5)], None, opts)
    digested: list[int] = []
    real = token_cache.content_key

    def recording(text: str) -> bytes:
        digested.append(len(text))
        return real(text)

    monkeypatch.setattr(token_cache, "content_key", recording)
    count = counter.request(grown)
    assert count == len(ENCODE(grown.system_prompt)) + len(ENCODE(grown.prompt))
    assert 0 < sum(digested) < 0.03 * len(grown.prompt)  # templates, the new and last parts
