"""A split turn's history and turn prefix calls are in flight at the same time (issue 38: never
slower than the agent alone; pi 0.73 makes them with ``Promise.all``), over real HTTP to the
loopback model server, which records how many requests it held at once. Asserted by that
condition, never by a duration: the server answers a ``meet`` request as soon as the other one
is in flight too, so calls made one after the other would each wait the whole latency and the
server would never see two at once."""

from __future__ import annotations

from collections.abc import Callable
from threading import Thread
from typing import Any

import pytest
from llm.llm_fakes import FakeLLMServer, Flag, error, hang, meet, ok, openai

from api_client.contract.errors import ModelError
from helpers.sessions import assistant, chain, chars, user
from worker.compaction.prepare import CompactionSettings, Preparation, prepare_compaction
from worker.compaction.summarize import SummarizationError, compact
from worker.llm.router import Router
from worker.tokens import EstimateTokenizer

LATENCY_S = 20.0  # the model's latency: what calls one after the other would each wait
WAIT_S = 30.0  # a condition the test waits for holds well before this


def split_turn() -> Preparation:
    items = [user(chars(400)), assistant(chars(40)), user(chars(400)), assistant(chars(400)),
             assistant(chars(400))]
    prep = prepare_compaction(chain(*items), CompactionSettings(150, 16_384), EstimateTokenizer())
    assert prep is not None and prep.is_split_turn and prep.messages_to_summarize
    return prep


def by_call(body: Any) -> str | None:
    """The server's key of a request: which summary call of the compaction it is."""
    prompt = body["messages"][-1]["content"] if isinstance(body, dict) else ""
    if "## Original Request" in prompt:
        return "prefix"
    return "short" if "pull request description" in prompt else "history"


@pytest.fixture
def model(llm_server: FakeLLMServer, make_router: Callable[..., Router]) -> Router:
    llm_server.keyer = by_call
    return make_router([openai(llm_server, "m", timeout_s=LATENCY_S + WAIT_S)])


def wait_for(server: FakeLLMServer, condition: Callable[[], bool]) -> None:
    with server.flight:
        assert server.flight.wait_for(condition, WAIT_S)


def test_history_and_prefix_calls_are_in_flight_at_once(llm_server: FakeLLMServer,
                                                        model: Router) -> None:
    llm_server.script("history", meet(2, LATENCY_S))
    llm_server.script("prefix", meet(2, LATENCY_S))
    out = compact(split_turn(), model)
    assert llm_server.most_in_flight == 2
    assert sorted(llm_server.keys()[:2]) == ["history", "prefix"]
    assert llm_server.keys()[2] == "short"  # the short summary reads the merged summary
    assert out.summary.startswith("summary from history #1\n\n---\n\n**Turn Context")
    assert [c.text for c in out.calls] == ["summary from history #1", "summary from prefix #1",
                                           "summary from short #1"]


@pytest.mark.parametrize(("failing", "other", "message"), [
    ("prefix", "history", "Turn prefix summarization failed"),
    ("history", "prefix", "Summarization failed"),
])
def test_a_failed_call_fails_the_compaction_and_stops_the_other(
        llm_server: FakeLLMServer, model: Router, failing: str, other: str, message: str) -> None:
    """The failure surfaces as it does alone; the call still in flight is cancelled (its
    connection closed) before ``compact`` returns, not left running for the model's latency."""
    llm_server.script(other, hang())
    # It fails once both calls are in flight (failed before the other was sent, the other is
    # rightly never sent and never seen closed).
    llm_server.script(failing, error(400, {"error": {"message": "bad request"}}, meet=2))
    with pytest.raises(SummarizationError, match=message):
        compact(split_turn(), model)
    wait_for(llm_server, lambda: other in llm_server.closed)
    assert llm_server.count("short") == 0


def test_cancelling_the_job_stops_both_calls(llm_server: FakeLLMServer, model: Router) -> None:
    llm_server.script("history", hang())
    llm_server.script("prefix", hang())
    flag = Flag()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            compact(split_turn(), model, cancel=flag)
        except BaseException as err:  # handed to the test thread
            raised.append(err)

    worker = Thread(target=run)
    worker.start()
    wait_for(llm_server, lambda: llm_server.in_flight == 2)
    flag.event.set()
    worker.join(WAIT_S)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], ModelError)
    assert type(raised[0]).__name__ == "ModelCancelledError"
    wait_for(llm_server, lambda: sorted(llm_server.closed) == ["history", "prefix"])


def test_a_split_turn_without_history_makes_the_prefix_call_alone(
        llm_server: FakeLLMServer, model: Router) -> None:
    items = [user(chars(400)), assistant(chars(400)), assistant(chars(400))]
    prep = prepare_compaction(chain(*items), CompactionSettings(150, 16_384), EstimateTokenizer())
    assert prep is not None and prep.is_split_turn and not prep.messages_to_summarize
    llm_server.script("prefix", ok("prefix"))
    out = compact(prep, model)
    assert llm_server.keys() == ["prefix", "short"]
    assert out.summary.startswith("No prior history.\n\n---\n\n**Turn Context (split turn):**"
                                  "\n\nprefix")
