"""The core's compaction flow (worker.compaction.summarize) through the router over HTTP, on a
reference session far larger than the model window: the chunked path with the core's own
prompts."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from llm.llm_fakes import FakeLLMServer, cl100k, openai

from api_client.contract.session import load_session
from worker.compaction.prepare import CompactionSettings, prepare_compaction
from worker.compaction.summarize import SPLIT_TURN_SEPARATOR, compact
from worker.llm.router import Router
from worker.tokens import get_tokenizer

pytestmark = pytest.mark.fixtures

WINDOW = 64_000


def test_a_session_larger_than_the_window_compacts_in_chunks(
        pi_dir: Path, llm_server: FakeLLMServer, make_router: Callable[..., Router]) -> None:
    session = load_session((pi_dir / "large-session.jsonl").read_text(), source="large-session")
    tree = session.tree()
    prep = prepare_compaction(tree.path_to(tree.leaf_id), CompactionSettings(),
                              get_tokenizer("estimate"))
    assert prep is not None and prep.is_split_turn
    router = make_router([openai(llm_server, "m", context_window=WINDOW, timeout_s=10)])

    outcome = compact(prep, router.for_job())

    bodies = [seen.body for seen in llm_server.seen]
    for body in bodies:  # every request fits the window (cl100k count, 10 % margin)
        tokens = sum(cl100k(m["content"]) for m in body["messages"])
        assert tokens + body["max_tokens"] <= WINDOW * 0.9
    # floor(0.8 * 16384); these chunks are large enough not to have their output capped
    history = [i for i, body in enumerate(bodies) if body["max_tokens"] == 13_107]
    assert len(history) >= 3
    history_call = outcome.calls[0]
    assert history_call.chunks == len(history) and history_call.attempts == len(history)
    for before, after in itertools.pairwise(history):  # each chunk's summary feeds the next
        previous = f"summary from m #{before + 1}"
        assert (f"<previous-summary>\n{previous}\n</previous-summary>"
                in bodies[after]["messages"][1]["content"])
    assert outcome.summary.startswith(f"summary from m #{history[-1] + 1}{SPLIT_TURN_SEPARATOR}")
    assert re.search(r"<modified-files>\n", outcome.summary)
    assert (bodies[-1]["max_tokens"] == 512
            and outcome.short_summary == f"summary from m #{len(bodies)}")
