"""The chunk planner's pure parts: the token counter, overflow numbers, the shrink, the
split."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from llm.llm_fakes import cl100k, conversation_of, make_request, user

from worker.llm.chunking import (
    COUNTER,
    SAFETY,
    OverflowNumbers,
    clip_message,
    estimate_request,
    estimate_text,
    message_cost,
    next_chunk,
    parse_overflow,
    request_fits,
    shrink_limit,
)

HEX = " ".join(f"{(i * 97) % 256:02x}" for i in range(2000))
MINIFIED = json.dumps([{"id": i, "k": f"v{i}", "ok": i % 2 == 0} for i in range(300)],
                      separators=(",", ":"))


def test_the_core_tokenizer_counts() -> None:
    assert COUNTER == "cl100k"


@pytest.mark.parametrize(
    ("text", "at_least_x_chars4"),
    [
        (HEX, 2.5),  # 2 hex digits and a space: about 0.7 tokens a char
        (MINIFIED, 1.5),
        ("word " * 400, 0.7),  # prose: chars/4 was a slight overestimate
    ],
)
def test_estimates_are_cl100k_counts(text: str, at_least_x_chars4: float) -> None:
    assert estimate_text(text) == cl100k(text)
    assert estimate_text(text) >= at_least_x_chars4 * math.ceil(len(text) / 4)


@pytest.mark.parametrize("text", ["", "short", HEX, MINIFIED, "ünïcödé 💥 " * 300])
@pytest.mark.parametrize("slack", [-50, -1, 0, 1, 50])
def test_the_cheap_fit_check_agrees_with_the_count(text: str, slack: int) -> None:
    request = make_request(prompt=text, system="sys")
    budget = estimate_request(request) + slack
    assert request_fits(request, budget) is (estimate_request(request) <= budget)


def test_message_costs_count_what_the_message_says() -> None:
    message = user(HEX)
    assert cl100k(HEX) < message_cost(message) <= cl100k(HEX) + 10


def test_the_estimate_setting_counts_chars_over_4_without_the_core() -> None:
    code = (
        "import sys; sys.modules['worker.compaction'] = None\n"
        "from worker.llm import chunking as c\n"
        "from worker.tokens import get_tokenizer\n"
        "e = c.RequestCounter(get_tokenizer('estimate'))\n"
        "print(e.name, e.text('abcdefghi'), e.message({'role': 'user', 'content': 'x' * 40}))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=root)
    assert out.stdout.split() == ["chars/4", "3", "18"]  # ceil(9 / 4); ceil(40 / 4) + 8 overhead


@pytest.mark.parametrize(
    ("setting", "counter"),
    [
        ("estimate", "chars/4"),
        ("tiktoken", "cl100k"),
    ],
)
def test_the_router_counts_with_the_configured_tokenizer(setting: str, counter: str) -> None:
    from worker.llm import build_summarizer
    from worker.llm.settings import LlmSettings
    from worker.tokens import get_tokenizer

    router = build_summarizer(LlmSettings(), tokenizer=get_tokenizer(setting))
    try:
        assert router.counter.name == counter
        assert router.counter.text(HEX) == get_tokenizer(setting).count_text(HEX)
    finally:
        router.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("This model's maximum context length is 8192 tokens. However, you requested 13438 tokens "
         "(11390 in the messages, 2048 in the completion). Please reduce the length of the "
         "messages or completion.",
         OverflowNumbers(8192, 13438, True)),
        ("This model's maximum context length is 128,000 tokens. However, your messages resulted "
         "in 130,512 tokens. Please reduce the length of the messages.",
         OverflowNumbers(128_000, 130_512, False)),
        ("This model's maximum context length is 32768 tokens. However, your request has 40000 "
         "input tokens.",
         OverflowNumbers(32768, 40000, False)),
        ("invalid_request_error: prompt is too long: 213462 tokens > 200000 maximum",
         OverflowNumbers(200_000, 213_462, False)),
        ("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
         "decrease input length",
         OverflowNumbers(200_000, 188_240, False)),
        ("exceed_context_size_error: the request exceeds the available context size, "
         "try increasing it", None),
        ("maximum context length is 8192 tokens", None),
        ("Rate limit reached: 40000 tokens per minute", None),
    ],
)
def test_overflow_numbers(text: str, expected: OverflowNumbers | None) -> None:
    assert parse_overflow(text) == expected


@pytest.mark.parametrize(
    ("numbers", "sent", "completion", "next_completion", "expected"),
    [
        (None, 3400, 200, 200, 1700),  # no numbers: halve
        # the server counts 4x ours: (4000 * 0.9 - 200) / 4 of our tokens
        (OverflowNumbers(4000, 13_800, True), 3400, 200, 200, 850),
        # prompt-only count, same answer
        (OverflowNumbers(4000, 13_600, False), 3400, 200, 200, 850),
        # the llama.cpp report: 855 of ours counted 11 390 with 2 048 of completion on 8 192
        (OverflowNumbers(8192, 13_438, True), 855, 2048, 2048, 399),
        (OverflowNumbers(4000, 4100, True), 3000, 100, 100, 2625),  # a slightly larger count
        # the server counts as we do, yet refuses: shrink by the margin at least
        (OverflowNumbers(4000, 3100, True), 3000, 100, 100, 2700),
        # the completion alone was too large: the prompt may stay (the output budget shrinks)
        (OverflowNumbers(8192, 14_000, True), 900, 13_107, 2048, 900),
        (OverflowNumbers(8192, 100, True), 900, 200, 200, 450),  # nonsense numbers: halve
    ],
)
def test_shrink_limit(numbers: OverflowNumbers | None, sent: int, completion: int,
                      next_completion: int, expected: int) -> None:
    assert shrink_limit(numbers, sent, completion, next_completion) == expected


def test_a_serialization_larger_than_the_costs_drops_about_the_excess() -> None:
    # costs that say 10 a message while the prompt carries ~85: the chunk is cut to the limit,
    # not to one
    messages = conversation_of(40, 400)
    request = make_request(messages, chunkable=True)
    sub, end = next_chunk(request, messages, [10] * 40, 0, None, 1000)
    assert (estimate_request(sub) <= 1000 and estimate_request(sub) > 1000 * SAFETY * 0.75
            and end < 40)


@pytest.mark.parametrize("text", ["z" * 60_000, HEX * 5, "word " * 20_000])
def test_clipping_follows_the_density_of_the_text(text: str) -> None:
    clipped = clip_message(user(text), 1000)
    assert "chars omitted to fit the summarizer" in clipped["content"]
    assert 700 <= cl100k(clipped["content"]) <= 1200
