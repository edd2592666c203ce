import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from api_client.contract.session import load_session
from helpers.sessions import assistant, chain, chars, tool_result, user
from worker.compaction import CompactionSettings, compact, plan_prune, prepare_compaction
from worker.summary_requests import SummaryResult, Usage
from worker.tokens import EstimateTokenizer, TiktokenTokenizer, TokenCache, get_tokenizer
from worker.tokens.counting import SEGMENT_MIN_CHARS, count_pieces, segments

IMAGE = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
EST = EstimateTokenizer()


@pytest.mark.parametrize(
    ("message", "tokens"),
    [
        (user(chars(9)), 3),
        # images count 0 for users
        ({"role": "user", "content": [{"type": "text", "text": chars(8)}, IMAGE]}, 2),
        ({"role": "user", "content": 42}, 0),
        # 3 + len("read") + len('{"path":"a"}')=12 -> ceil(19/4)
        (assistant(chars(3), tools=[("read", {"path": "a"})]), 5),
        ({"role": "assistant", "content": [{"type": "thinking", "thinking": chars(8)}]}, 2),
        (tool_result(chars(4)), 1),
        ({"role": "toolResult", "content": [IMAGE]}, 1200),
        ({"role": "toolResult", "content": "abcde"}, 2),
        ({"role": "bashExecution", "command": "ls", "output": chars(6)}, 2),
        ({"role": "bashExecution", "command": "ls", "output": chars(6),
          "excludeFromContext": True}, 2),
        ({"role": "compactionSummary", "summary": chars(40)}, 10),
        ({"role": "branchSummary", "summary": chars(41)}, 11),
        # Q1: custom counts its converted text; an image 4800 chars.
        ({"role": "custom", "customType": "t", "content": chars(16), "display": True}, 4),
        ({"role": "custom", "customType": "t", "content": [IMAGE], "display": True}, 1200),
        ({"role": "hookMessage", "customType": "t", "content": chars(16)}, 4),
        ({"role": "pythonExecution", "code": "x", "output": "", "exitCode": 0,
          "excludeFromContext": True}, 0),
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

    def no_encoding(text: str) -> int:
        raise AssertionError("old text was tokenized again")

    monkeypatch.setattr(tok, "_encoded_len", no_encoding)
    assert tok.count(tool_result(str(text))) == first  # an equal string from a fresh snapshot


def test_get_tokenizer_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("bpe")
    assert get_tokenizer("estimate") is not get_tokenizer("estimate")  # no process-wide one
    cache = TokenCache()
    tok = get_tokenizer("tiktoken", cache)
    assert isinstance(tok, TiktokenTokenizer) and tok.cache is cache


# --- the content-keyed cache (worker.tokens.cache) -----------------------------------------------
def test_the_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    cache = TokenCache(max_entries=3)
    for text in ("a", "b", "c"):
        cache.count(text, len)
    cache.count("a", lambda _: 99)  # a hit: "a" becomes the most recent
    cache.count("d", len)  # evicts "b"
    assert len(cache) == 3
    assert cache.count("a", lambda _: 99) == 1
    assert cache.count("b", lambda _: 99) == 99  # counted again


def test_the_cache_is_keyed_by_content_not_by_the_string_object() -> None:
    cache = TokenCache()
    calls: list[str] = []
    text = "tool output " * 100
    assert cache.count(text, lambda t: calls.append(t) or 7) == 7
    assert cache.count("".join(["tool output "] * 100), lambda t: calls.append(t) or 0) == 7
    assert len(calls) == 1 and cache.hits == 1 and cache.misses == 1


def test_eight_threads_share_one_cache_and_agree_on_every_count() -> None:
    cache = TokenCache(max_entries=500)
    tok = TiktokenTokenizer(cache)
    texts = [f"message {i}: " + "word " * (i % 50) for i in range(1000)]
    expected = [len(tok.encoding().encode(t)) for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: [tok.count_text(t) for t in texts], range(8)))
    assert all(r == expected for r in results)
    assert len(cache) <= 500


@pytest.mark.parametrize(
    "text",
    [
        "[User]: hi\n[Assistant]: hello\n\n[Tool result]: x\n" * 100,
        "a\n[b" * 2000,
        "'s\n['s\n\n\n[ \n[\n[\t[x]\n [y]\r\n[z]" * 300,
        "123\n[456]\n[789" * 700,
        "punct!!\n[¿qué?]\n[😀]\n\n\n[end" * 400,
        "```\n</conversation>\n\n<previous-summary>\n< <<\n<'s\n<\t" * 300,
    ],
)
def test_segmented_counts_equal_the_count_of_the_whole_text(text: str) -> None:
    tok = TiktokenTokenizer()
    assert len(text) > SEGMENT_MIN_CHARS and len(segments(text)) > 1
    assert tok.count_text(text) == len(tok.encoding().encode(text, disallowed_special=()))


_ALPHABET = ["a", "Z", "é", "e\u0301", "1", "²", "Ⅻ", "\n", "\n", "\n", "\r", " ", "  ", "\t", "'",
             "'s", "[", "]", ".", "😀", ":", "{", "}", ",", "word", "42", "中", "\u2028", "\u00a0",
             "(", ")", "=", '"', "\\", "\\n", "/", "-", "_", "$", "`", "ǅ", "٣", "<", "</", ">"]


@pytest.mark.parametrize("seed", range(8))
def test_the_pieces_of_generated_texts_sum_to_the_count_of_the_whole(seed: int) -> None:
    # Letters, digits, marks, newlines, CR, punctuation, emoji: every kind of character that
    # decides where cl100k's pattern cuts, in 400 random texts per seed.
    rng = random.Random(seed)
    encode = TiktokenTokenizer.encoding().encode_ordinary
    cut = 0
    for _ in range(400):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(60, 700)))
        pieces = count_pieces(text)
        assert "".join(pieces) == text
        assert sum(len(encode(p)) for p in pieces) == len(encode(text)), repr(text)
        cut += len(pieces) > 1
    assert cut > 300  # the texts were cut, so the equality says something


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("x" * 300, ["x" * 300]),  # no word end: one piece
        ("é" * 300 + "\n" + "ü" * 10, ["é" * 300 + "\n" + "ü" * 10]),  # only ASCII counts
        ("a" * 300 + " b" * 5, ["a" * 300 + " b" * 5]),  # a space is no cut: labels have them
        ("a" * 300 + "]" + "b" * 5, ["a" * 300 + "]" + "b" * 5]),  # nor "]": labels end so
        ("." + "a" * 300 + ".\n" + "b" * 10, ["." + "a" * 300, ".\n" + "b" * 10]),
        ("a" * 300 + "\nmid;" + "z" * 5, ["a" * 300, "\nmid", ";" + "z" * 5]),
        ("9" * 300 + "(x)" + "z" * 5, ["9" * 300, "(x", ")" + "z" * 5]),  # a digit ends too
        ("a" * 300 + "\nend\n\n", ["a" * 300, "\nend\n\n"]),  # trailing newlines: no cut
        ("[User]: " + "a" * 300 + "\nmid\n" + "z" * 5 + "\n\n",
         ["[User]: " + "a" * 300, "\nmid", "\n" + "z" * 5 + "\n\n"]),
        ("[Assistant tool calls]: " + "a" * 300 + "\nz" + "\n\n",
         ["[Assistant tool calls]: " + "a" * 300, "\nz\n\n"]),
    ],
)
def test_long_texts_are_cut_at_their_first_and_last_word_end(text: str, pieces: list[str]) -> None:
    assert count_pieces(text) == pieces


def test_a_message_and_its_prompt_part_share_the_middle_piece() -> None:
    # What makes a cold plan tokenize the span once: the prompt's part re-counts only its ends.
    tok = TiktokenTokenizer()
    body = "first line\n" + "".join(f"line {i} of a long tool output\n" for i in range(200)) + "end"
    tok.count(tool_result(body))
    encoded: list[str] = []
    real = tok._encoded_len
    tok._encoded_len = lambda t: encoded.append(t) or real(t)  # type: ignore[method-assign]
    prompt = "[User]: hi\n\n[Tool result]: " + body + "\n\n[User]: thanks"
    assert tok.count_text(prompt) == len(tok.encoding().encode_ordinary(prompt))
    assert sum(len(t) for t in encoded) < 100  # the two ends, not the 6 000 characters between


def _requests(path: list[Any]) -> list[str]:
    prep = prepare_compaction(path, CompactionSettings(), get_tokenizer("estimate"))
    assert prep is not None
    seen: list[str] = []

    class Recorder:
        def summarize(self, request: Any, cancel: Any = None) -> SummaryResult:
            seen.append(request.prompt)
            return SummaryResult("summary", "m", "p", Usage(), 1)

    compact(prep, Recorder())
    return seen


def test_segmented_counts_are_exact_on_the_reference_prompts(pi_file: Path) -> None:
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    tok = TiktokenTokenizer()
    for prompt in _requests(list(tree.path_to(tree.leaf_id))):
        assert tok.count_text(prompt) == len(tok.encoding().encode(prompt, disallowed_special=()))


def test_a_grown_session_tokenizes_only_its_new_text(pi_file: Path) -> None:
    text = pi_file.read_text(encoding="utf-8")
    tree = load_session(text).tree()
    path = list(tree.path_to(tree.leaf_id))
    new = [{"type": "message", "id": "n1", "parentId": path[-1].id,
            "message": user("[new] " + "fresh words " * 50)},
           {"type": "message", "id": "n2", "parentId": "n1", "message": assistant("[new] answer")}]
    grown = [*path, *chain(*new)]
    tok = TiktokenTokenizer()
    prepare_compaction(path, CompactionSettings(), tok)
    plan_prune(path, tok)
    encoded: list[str] = []
    real = tok._encoded_len
    tok._encoded_len = lambda t: encoded.append(t) or real(t)  # type: ignore[method-assign]
    prepare_compaction(grown, CompactionSettings(), tok)
    plan_prune(grown, tok)
    assert encoded and all("[new]" in t for t in encoded)


def test_job_tokenizer_counts_each_message_object_once() -> None:
    from worker.tokens import JobTokenizer

    calls: list[object] = []

    class Counting(EstimateTokenizer):
        def count(self, message: Any) -> int:
            calls.append(message)
            return super().count(message)

    job = JobTokenizer(Counting())
    first = {"role": "user", "content": "x" * 40, "timestamp": 1}
    twin = dict(first)  # equal content, another object: counted again (by the inner cache)
    assert [job.count(first), job.count(first), job.count(twin)] == [10, 10, 10]
    assert calls == [first, twin] and calls[0] is first and calls[1] is twin
    assert job.name == "estimate" and job.count_text("abcd") == 1
    third = {"role": "user", "content": "y" * 8, "timestamp": 2}
    assert job.total([first, third, twin, third]) == 10 + 2 + 10 + 2
    assert calls == [first, twin, third]  # only the new object was counted


def test_total_tokens_sums_any_tokenizers_counts() -> None:
    from worker.tokens import JobTokenizer, token_counts, total_tokens

    messages = [{"role": "user", "content": "x" * n, "timestamp": 1} for n in (4, 40, 0)]
    assert token_counts(EstimateTokenizer(), messages) == [1, 10, 0]
    assert token_counts(JobTokenizer(EstimateTokenizer()), messages) == [1, 10, 0]
    assert total_tokens(EstimateTokenizer(), messages) == 1 + 10 + 0
    assert total_tokens(JobTokenizer(EstimateTokenizer()), iter(messages)) == 11


_CUT_BEFORE_BRACKET_LINES = re.compile(r"(?<=\n)(?=[\[<])")


@pytest.mark.parametrize(
    "text",
    ["", "[", "\n", "\n[", "[\n[", "\n[\n[", "a\n\n[b", "x\n[y\n[z", "[a]\n[b]\n", "\n\n[[",
     "a\r\n[b", "no cut here", "\n\n\n", "[User]: a\n\n[Assistant]: b\n\n[Tool result]: c",
     "a\n<b", "\n<\n[", "x\n</conversation>\n\n<previous-summary>\n[y", "<\n<<\n[<\n<["],
)
def test_segments_cut_exactly_where_the_zero_width_pattern_cuts(text: str) -> None:
    # The defining pattern: cut after a newline, before "[" or "<" (str.split is the fast one).
    assert segments(text) == _CUT_BEFORE_BRACKET_LINES.split(text)
    assert "".join(segments(text)) == text


def test_the_request_counter_shares_the_planners_message_counts() -> None:
    from worker.llm.chunking import RequestCounter
    from worker.tokens import counts_of

    shared = get_tokenizer("estimate")
    message = {"role": "user", "content": "x" * 40, "timestamp": 1}
    counts_of(shared).get(message, lambda _: 1234)  # as a planner job left it
    assert counts_of(shared) is counts_of(shared)
    assert RequestCounter(shared).message(message) == 1234 + 8  # a lookup, not a recount
    other = EstimateTokenizer()  # another instance (another worker): its own counts
    assert RequestCounter(other).message(message) == 10 + 8


def test_priming_counts_a_large_session_ahead_and_exactly(pi_file: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A cold plan tokenizes the session on several threads first (worker.service._compact_job);
    # the plan then finds every message's count in the cache, equal to a serial count.
    import worker.tokens.counting as counting
    from api_client.contract.session.convert import for_compaction
    from worker.tokens import JobTokenizer
    from worker.tokens.memo import IdentityMemo

    monkeypatch.setattr(counting, "PRIME_THREADS", 2)
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    messages = [m for e in tree.path_to(tree.leaf_id) if (m := for_compaction(e)) is not None]
    serial = [TiktokenTokenizer(TokenCache()).count(m) for m in messages]
    primed = JobTokenizer(TiktokenTokenizer(TokenCache()), IdentityMemo())
    assert primed.prime(messages) > counting.PRIME_MIN_CHARS
    encoded: list[str] = []
    inner = primed.inner
    assert isinstance(inner, TiktokenTokenizer)
    real = inner._encoded_len
    inner._encoded_len = lambda t: encoded.append(t) or real(t)  # type: ignore[method-assign]
    lookups = inner.cache.hits + inner.cache.misses
    assert [primed.count(m) for m in messages] == serial
    assert encoded == []  # nothing left to tokenize
    # Each message's count was summed from its primed pieces: the plan digests nothing again.
    assert inner.cache.hits + inner.cache.misses == lookups
    assert primed.prime(messages) == 0  # counted messages are skipped


def test_priming_the_prompt_parts_leaves_only_their_edges_to_the_prompt_count(
        pi_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The summary prompt renders a tool call as name(k=...), not as the JSON a message count
    # sees: a cold job primes the serialized parts too (worker.service._compact_job._prime), so
    # counting the prompt tokenizes only each part's short head and tail, and counts exactly.
    import worker.tokens.counting as counting
    from api_client.contract.session.convert import convert_to_llm, for_compaction
    from worker.compaction.serialize import prompt_parts, serialize_conversation
    from worker.tokens import JobTokenizer
    from worker.tokens.memo import IdentityMemo

    monkeypatch.setattr(counting, "PRIME_THREADS", 2)
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    messages = [m for e in tree.path_to(tree.leaf_id) if (m := for_compaction(e)) is not None]
    llm = convert_to_llm(messages)  # what the summary prompt serializes
    prompt = f"<conversation>\n{serialize_conversation(llm)}\n</conversation>\n\nSummarize."

    def encoded_by_prompt_count(texts: list[str]) -> tuple[int, int]:
        tok = JobTokenizer(TiktokenTokenizer(TokenCache()), IdentityMemo())
        tok.prime(messages, texts)
        inner = tok.inner
        assert isinstance(inner, TiktokenTokenizer)
        encoded: list[str] = []
        real = inner._encoded_len
        inner._encoded_len = lambda t: encoded.append(t) or real(t)  # type: ignore[method-assign]
        return tok.count_text(prompt), sum(map(len, encoded))

    count, left_without = encoded_by_prompt_count([])
    count_primed, left_with = encoded_by_prompt_count(prompt_parts(llm))
    assert count_primed == count == TiktokenTokenizer(TokenCache()).count_text(prompt)
    assert left_with < 0.01 * len(prompt)  # the template around the conversation
    assert left_with < left_without


def test_priming_counts_a_little_new_text_on_the_jobs_own_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Below PRIME_SERIAL_CHARS a hand-off to the pool costs more than it saves; the counts
    # still land in the cache and in what is stored for the other workers.
    import worker.tokens.counting as counting
    from worker.tokens import JobTokenizer
    from worker.tokens.memo import IdentityMemo

    monkeypatch.setattr(counting, "ThreadPoolExecutor",
                        lambda *a, **k: pytest.fail("handed to a pool"))
    question = "a short question " * 50
    tok = JobTokenizer(TiktokenTokenizer(TokenCache()), IdentityMemo())
    counted: list[tuple[bytes, int]] = []
    assert tok.prime([user(question), tool_result("ok")], counted=counted) == len(question) + 2
    assert len(question) < counting.PRIME_SERIAL_CHARS
    encode = TiktokenTokenizer.encoding().encode_ordinary
    assert sorted(n for _, n in counted) == sorted([len(encode("ok")), len(encode(question))])
    assert JobTokenizer(EstimateTokenizer()).prime([user("x" * 10**6)]) == 0


def test_a_grown_session_primes_only_what_it_grew_by(pi_file: Path) -> None:
    from worker.compaction import prime_counts
    from worker.tokens import JobTokenizer
    from worker.tokens.memo import IdentityMemo

    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    path = list(tree.path_to(tree.leaf_id))
    tok = JobTokenizer(TiktokenTokenizer(TokenCache()), IdentityMemo())
    assert prime_counts(tok, path, prune=True) > 100_000  # cold: the whole session
    plan_prune(path, tok)
    prepare_compaction(path, CompactionSettings(), tok)  # counts every planned message
    new = [{"type": "message", "id": "n1", "parentId": path[-1].id,
            "message": user("[new] " + "fresh words " * 400)},
           {"type": "message", "id": "n2", "parentId": "n1",
            "message": assistant("[new] " + "an answer " * 400)}]
    grown = [*path, *chain(*new)]
    inner = tok.inner
    assert isinstance(inner, TiktokenTokenizer)
    encoded: list[str] = []
    real = inner._encoded_len
    inner._encoded_len = lambda t: encoded.append(t) or real(t)  # type: ignore[method-assign]
    assert 0 < prime_counts(tok, grown, prune=True) < 20_000
    assert encoded and all("fresh words" in t or "an answer" in t or "[new]" in t for t in encoded)
    encoded.clear()
    prepare_compaction(grown, CompactionSettings(), tok)
    assert encoded == []  # the plan found every count


def test_priming_a_session_larger_than_the_cache_still_counts_exactly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A message whose pieces were evicted before its total was summed gets no total: the plan
    # counts it itself, and every count still equals a serial one.
    import worker.tokens.counting as counting
    from worker.tokens import JobTokenizer
    from worker.tokens.memo import IdentityMemo

    monkeypatch.setattr(counting, "PRIME_THREADS", 2)
    messages = [user(f"question {i}: " + "words and more words " * 40) for i in range(60)]
    primed = JobTokenizer(TiktokenTokenizer(TokenCache(max_entries=10)), IdentityMemo())
    assert primed.prime(messages) > 0
    assert [primed.count(m) for m in messages] == [
        TiktokenTokenizer(TokenCache()).count(m) for m in messages]
