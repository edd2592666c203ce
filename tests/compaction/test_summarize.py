"""The summarisation control flow over a recording summarizer (model calls are tested in
tests/llm)."""

import threading

import pytest

from api_client.contract.errors import ModelError
from helpers.sessions import assistant, chain, chars, user
from worker.compaction.facts import FACT_KINDS
from worker.compaction.prepare import CompactionSettings, prepare_compaction
from worker.compaction.prompts import BRANCH_MAX_TOKENS, branch_preamble
from worker.compaction.summarize import (
    NO_PRIOR_HISTORY,
    SummarizationError,
    compact,
    summarize_branch,
)
from worker.summary_requests import CancelToken, SummaryRequest, SummaryResult, Usage
from worker.tokens import EstimateTokenizer

EST = EstimateTokenizer()


class Recorder:
    def __init__(self, fail: str | None = None) -> None:
        self.requests: list[SummaryRequest] = []
        self.threads: set[str] = set()
        self.fail = fail
        self.lock = threading.Lock()

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        with self.lock:
            self.requests.append(request)
            self.threads.add(threading.current_thread().name)
        if request.purpose == self.fail:
            raise ModelError("boom")
        return SummaryResult(f"<{request.purpose}>", "m", "p", Usage(1, 1), 1)

    def purposes(self) -> list[str]:
        return sorted(r.purpose for r in self.requests)


def plan(items: list, keep: int, reserve: int = 16_384):  # type: ignore[no-untyped-def]
    prep = prepare_compaction(chain(*items), CompactionSettings(keep, reserve), EST)
    assert prep is not None
    return prep


def test_split_turn_runs_history_and_prefix_then_short() -> None:
    prep = plan([user(chars(400)), assistant(chars(40)), user(chars(400)), assistant(chars(400)),
                 assistant(chars(400))], 150)
    rec = Recorder()
    out = compact(prep, rec)
    assert out.summary == "<history>\n\n---\n\n**Turn Context (split turn):**\n\n<turn_prefix>"
    assert out.short_summary == "<short>"
    assert (rec.purposes() == ["history", "short", "turn_prefix"]
            and rec.requests[-1].purpose == "short")
    assert [r.max_tokens for r in sorted(rec.requests, key=lambda r: r.purpose)] == [
        13107, 512, 8192]
    assert rec.requests[-1].prompt.count("<previous-summary>\n" + out.summary.split("\n\n<")[0])


def test_no_history_uses_previous_summary_without_a_call() -> None:
    items = [user("a"), {"type": "compaction", "summary": "prev", "firstKeptEntryId": "zz",
                         "tokensBefore": 1}, user(chars(40))]
    rec = Recorder()
    out = compact(plan(items, 100_000), rec)
    assert out.summary == "prev" and rec.purposes() == ["short"]


def test_nothing_at_all_gives_no_prior_history_and_tags() -> None:
    prep = plan([user(chars(40)), assistant(tools=[("read", {"path": "/a"})])], 100_000)
    out = compact(prep, Recorder())
    zero = {"total": 0, "inSummary": 0, "appended": 0, "dropped": 0}
    assert out.summary == NO_PRIOR_HISTORY and out.details == {
        "readFiles": [], "modifiedFiles": [], "facts": dict.fromkeys(FACT_KINDS, zero)}


def test_reserve_tokens_drive_budgets_and_custom_instructions_reach_history() -> None:
    prep = plan([user(chars(400)), assistant(tools=[("edit", {"path": "/e"})]), user(chars(400)),
                 assistant(chars(400))], 150, reserve=2000)
    rec = Recorder()
    out = compact(prep, rec, custom_instructions="focus on tests", extra_context=["ctx line"])
    history = next(r for r in rec.requests if r.purpose == "history")
    assert history.max_tokens == 1600 and history.reasoning
    assert "focus on tests" in history.prompt and "- ctx line" in history.prompt
    assert out.summary.endswith("<modified-files>\n/e\n</modified-files>")
    assert (history.rechunk is not None
            and history.rechunk(history.conversation[:1], "p").previous_summary == "p")


@pytest.mark.parametrize(
    ("purpose", "text"),
    [
        ("history", "Summarization failed: boom"),
        ("short", "Short summary failed: boom"),
    ],
)
def test_failures_name_the_call(purpose: str, text: str) -> None:
    prep = plan([user(chars(400)), assistant(chars(400)), user(chars(400)), assistant(chars(400))],
                150)
    with pytest.raises(SummarizationError, match=text):
        compact(prep, Recorder(fail=purpose))


def test_branch_summary_has_preamble_blank_line_and_tags() -> None:
    entries = chain(user("try x"), assistant("ok", tools=[("write", {"path": "/n.py"})]))
    rec = Recorder()
    out = summarize_branch(entries, rec, tokenizer=EST)
    # The fixed model text drops the request: the fact ledger appends it before the tags.
    assert out.summary == (f"{branch_preamble()}\n\n<branch>\n\n<session-facts>\n"
                           "requests:\n- try x\n"
                           "</session-facts>\n\n<modified-files>\n/n.py\n</modified-files>")
    assert out.facts is not None and out.facts["requests"] == {"total": 1, "inSummary": 0,
                                                               "appended": 1, "dropped": 0}
    assert out.facts["paths"] == {"total": 1, "inSummary": 1, "appended": 0, "dropped": 0}
    assert rec.requests[0].max_tokens == BRANCH_MAX_TOKENS and not rec.requests[0].reasoning
    assert summarize_branch([], rec, tokenizer=EST).summary is None


def test_turn_prefix_and_short_requests_can_be_split_for_small_windows() -> None:
    prep = plan([user(chars(400)), assistant(chars(40)), user(chars(400)), assistant(chars(400)),
                 assistant(chars(400))], 150)
    rec = Recorder()
    compact(prep, rec)
    prefix = next(r for r in rec.requests if r.purpose == "turn_prefix")
    assert prefix.rechunk is not None
    part = prefix.rechunk(prefix.conversation[:1], "earlier part")
    assert (part.purpose == "turn_prefix"
            and "<previous-summary>\nearlier part\n</previous-summary>" in part.prompt)
    short = next(r for r in rec.requests if r.purpose == "short")
    assert short.rechunk is not None
    merged = short.previous_summary or ""
    assert short.rechunk(short.conversation[:1], merged).prompt.count(merged) == 1
    later = short.rechunk(short.conversation[1:], "what the first part did")
    assert f"{merged}\n\nwhat the first part did" in later.prompt
