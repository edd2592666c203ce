"""Servers that count more tokens than we do: the router re-plans smaller chunks after an overflow
answer (numbers from the error, else halving), within a bound and the job's attempt budget; chunk
calls ask for less output than the chunk replaces. All over real HTTP to the loopback server."""

from __future__ import annotations

import re
from collections.abc import Callable

from llm.llm_fakes import (
    EXTRACTIVE,
    FakeLLMServer,
    Seen,
    Window,
    assistant,
    cl100k,
    conversation_of,
    fill,
    make_request,
    openai,
    user,
)

from worker.llm.chunking import estimate_text, message_cost
from worker.llm.router import MAX_SHRINKS, MIN_CHUNK_OUTPUT, Router

MakeRouter = Callable[..., Router]
CONVERSATION = conversation_of(70, 400)  # about 6 000 tokens by cl100k


def numbered(seen: Seen) -> list[int]:
    """The conversation messages a request carried, by their "message <i>:" marker."""
    return [int(n) for n in re.findall(r"message (\d+):", seen.body["messages"][1]["content"])]


def assert_complete_and_in_order(server: FakeLLMServer, n: int) -> None:
    carried = [i for seen in server.accepted() for i in numbered(seen)]
    assert carried == list(range(n))  # every message summarized once, in order


def shrink_lines(trail: tuple[str, ...]) -> list[str]:
    return [line for line in trail if ": shrink " in line]


def test_a_pessimistic_server_gets_smaller_chunks_from_its_numbers(llm_server: FakeLLMServer,
                                                                   make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=4.0))
    router = make_router([openai(llm_server, "m", context_window=4000)])
    result = router.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert llm_server.refused == [0]  # one refusal; its numbers were enough for every later chunk
    accepted = llm_server.accepted()
    assert all(s.counted is not None and s.counted + s.body["max_tokens"] <= 4000 for s in accepted)
    # planned at ~3 400 of our tokens the first time; after the shrink at about a quarter of that
    first = sum(cl100k(m["content"]) for m in llm_server.seen[0].body["messages"])
    assert first > 3000 and all(s.counted is not None and s.counted < first for s in accepted)
    assert (len(accepted) >= 7 and result.chunks == len(accepted)
            and result.attempts == len(llm_server.seen))
    assert_complete_and_in_order(llm_server, len(CONVERSATION))
    (line,) = shrink_lines(result.trail)
    assert re.search(r"shrink 1/3: ~\d+ tokens refused \(the server counted \d+ of its 4000 "
                     r"tokens\)", line)
    assert result.text == f"summary from m #{len(llm_server.seen)}"


def test_an_overflow_without_numbers_halves_the_chunks(llm_server: FakeLLMServer,
                                                       make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=4.0, numbers=False))
    router = make_router([openai(llm_server, "m", context_window=4000)])
    result = router.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    refused = [llm_server.seen[i] for i in llm_server.refused]
    sizes = [sum(cl100k(m["content"]) for m in s.body["messages"]) for s in refused]
    assert len(refused) == 2 and sizes[1] <= sizes[0] // 2  # 3 400 -> 1 700 refused -> 850 fits
    assert all(s.counted is not None and s.counted + s.body["max_tokens"] <= 4000
               for s in llm_server.accepted())
    assert_complete_and_in_order(llm_server, len(CONVERSATION))
    lines = shrink_lines(result.trail)
    assert [line.split(": shrink ")[1][:3] for line in lines] == ["1/3", "2/3"]
    assert all("no numbers in the error: halving" in line for line in lines)


def test_after_the_last_shrink_the_next_candidate_gets_the_request(llm_server: FakeLLMServer,
                                                                   make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=16.0, numbers=False))  # halving thrice is not enough
    router = make_router([openai(llm_server, "m", context_window=4000), openai(llm_server, "big")])
    result = router.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert llm_server.keys() == ["m"] * (MAX_SHRINKS + 1) + ["big"]
    assert llm_server.refused == list(range(MAX_SHRINKS + 1))
    assert result.model == "big" and result.attempts == MAX_SHRINKS + 2
    assert len(shrink_lines(result.trail)) == MAX_SHRINKS
    assert any("still too long after 3 smaller re-plans" in line for line in result.trail)
    assert any(line.startswith("openai/m: gave up (ContextOverflow") for line in result.trail)


def test_a_configured_bound(llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=4.0, numbers=False))
    router = make_router([openai(llm_server, "m", context_window=4000), EXTRACTIVE])
    router.max_shrinks = 1
    result = router.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert llm_server.keys() == ["m", "m"] and result.provider == "extractive"


def test_shrinks_spend_the_job_attempt_budget(llm_server: FakeLLMServer,
                                              make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=16.0, numbers=False))
    router = make_router([openai(llm_server, "m", context_window=4000), EXTRACTIVE],
                         llm_attempt_budget=3)
    result = router.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert (llm_server.keys() == ["m"] * 3 and result.attempts == 3
            and result.provider == "extractive")
    assert any("AttemptBudgetExhausted" in line for line in result.trail)


def test_a_whole_request_refused_is_chunked_at_the_size_the_numbers_allow(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(4000, factor=4.0))
    # no window configured: only the server knows it
    router = make_router([openai(llm_server, "m")])
    # about 2 000 of our tokens: fits our guess, not the server
    conversation = conversation_of(24, 400)
    result = router.summarize(make_request(conversation, chunkable=True, max_tokens=200))
    assert llm_server.refused == [0] and numbered(llm_server.seen[0]) == list(range(24))
    assert all(s.counted is not None and s.counted + s.body["max_tokens"] <= 4000
               for s in llm_server.accepted())
    assert result.chunks == len(llm_server.seen) - 1 >= 2
    assert_complete_and_in_order(llm_server, 24)


def test_an_output_budget_beyond_the_window_is_learned_from_the_error(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    llm_server.limit("m", Window(8192, factor=1.0))
    router = make_router([openai(llm_server, "m")])
    result = router.summarize(make_request(conversation_of(10, 400), chunkable=True,
                                           max_tokens=13107))
    first, *chunks = llm_server.seen
    assert first.body["max_tokens"] == 13107 and llm_server.refused == [0]
    # the prompt was fine: chunks about as large, each with an output budget that fits the window
    assert 1 <= len(chunks) <= 2 and all(s.body["max_tokens"] <= 8192 // 4 for s in chunks)
    assert_complete_and_in_order(llm_server, 10)
    assert result.chunks == len(chunks) and "of its 8192 tokens" in shrink_lines(result.trail)[0]


def test_chunk_calls_ask_for_less_than_they_replace(llm_server: FakeLLMServer,
                                                    make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", context_window=4000)])
    conversation = conversation_of(44, 400)
    result = router.summarize(make_request(conversation, chunkable=True, max_tokens=1000))
    assert result.chunks == len(llm_server.seen) >= 2
    previous = None
    for number, seen in enumerate(llm_server.seen, 1):
        replaced = (sum(message_cost(conversation[i]) for i in numbered(seen))
                    + estimate_text(previous))
        assert seen.body["max_tokens"] == min(1000, max(MIN_CHUNK_OUTPUT, replaced // 2))
        previous = f"summary from m #{number}"
    assert (llm_server.seen[0].body["max_tokens"] == 1000
            and llm_server.seen[-1].body["max_tokens"] < 1000)


def test_a_whole_request_keeps_the_full_output_budget(llm_server: FakeLLMServer,
                                                      make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", context_window=100_000)])
    router.summarize(make_request(conversation_of(4, 100), chunkable=True, max_tokens=5000))
    assert [s.body["max_tokens"] for s in llm_server.seen] == [5000]


def test_a_model_that_writes_its_whole_budget_still_shrinks_a_small_chunk(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    # A small first chunk (the next message alone nearly fills the window) and a model that writes
    # 95 % of what it may: with the output capped, each chunk summary is smaller than its input.
    llm_server.script("m", fill(0.95), fill(0.95), fill(0.95))
    router = make_router([openai(llm_server, "m", context_window=4000)])
    conversation = [user("Please look at this. " + "note " * 400),
                    assistant("A long report: " + "line " * 2500)]
    result = router.summarize(make_request(conversation, chunkable=True, max_tokens=1000))
    assert result.chunks == 2 and not any("SummaryNotSmaller" in line for line in result.trail)
    # uncapped: 1000, and not smaller
    assert llm_server.seen[0].body["max_tokens"] == MIN_CHUNK_OUTPUT


def test_hex_dumps_are_planned_with_the_real_count(llm_server: FakeLLMServer,
                                                   make_router: MakeRouter) -> None:
    # chars/4 would take each of these for ~750 tokens; cl100k (and this server) count ~2 100
    dump = " ".join(f"{(i * 37) % 256:02x}" for i in range(1000))
    conversation = [user(f"message {i}: dump follows\n{dump}") for i in range(6)]
    llm_server.limit("m", Window(4000, factor=1.0))
    router = make_router([openai(llm_server, "m", context_window=4000)])
    result = router.summarize(make_request(conversation, chunkable=True, max_tokens=200))
    assert llm_server.refused == [] and result.chunks == len(llm_server.seen) == 6
    assert_complete_and_in_order(llm_server, 6)
