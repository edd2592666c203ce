"""Drafts that land (docs/instant-compaction.md): the validity rule — fits / does not fit /
prefix changed / compaction since —, a stale draft extended rather than redone, observe's
timing, and draft tokens counted apart. A real worker and a loopback model that keeps the
prompts it was sent."""

from __future__ import annotations

from typing import Any

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, new_session, runtime_settings, session_events

from api_client import ClientSettings, CompactionClient
from api_client.client.draft_apply import DraftOutcome, check_draft, read_draft
from api_client.contract.wire import TokenUsage
from worker.celery_app import CompactorCelery
from worker.settings import WorkerSettings

RESERVE = 16_384  # the client's and the worker's reserve_tokens (the default)
HUGE_WINDOW = 10_000_000
FIRST_REQUEST = "The nightly import of bank statements crashed again"  # the sample's first ask


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    # A short kept part: a few appended turns give the next plan a cut after the draft's.
    return runtime_settings(module_redis, models=[model.candidate()], keep_recent_tokens=300)


def msg(text: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def draft_of(client: CompactionClient, sid: str) -> dict[str, Any] | None:
    return client.transport.run(read_draft(client.layout, sid))


def speculate(client: CompactionClient, sid: str) -> dict[str, Any]:
    assert client.compact(sid, reason="speculative").wait(30) is None
    draft = draft_of(client, sid)
    assert draft is not None
    return draft


def grow(client: CompactionClient, sid: str) -> int:
    """Six turns (far more than keep_recent_tokens, the bound drafts had before); returns what
    the validity rule counts for them: their stored lines' lengths / 4."""
    ids = [client.sessions.append(sid, msg(f"meanwhile {i}: " + "check the parser " * 150))
           for i in range(6)]
    lines = client.redis.hmget(client.layout.session(sid).entries, ids)
    return sum(len(line) // 4 for line in lines)


def check(client: CompactionClient, sid: str, window: int, ahead: int = 0) -> DraftOutcome:
    return client.transport.run(check_draft(client.layout, client.settings, sid, window, ahead))


def summary_core(draft: dict[str, Any]) -> str:
    """The draft's summary as a <previous-summary> carries it (no file tags, no fact block)."""
    return str(draft["summary"]).split("\n\n", 1)[0]


def job_prompts(model: ModelServer, since: int) -> str:
    return "\n".join(model.prompts[since:])


@pytest.fixture
def client(client: CompactionClient, model: ModelServer) -> CompactionClient:
    model.release()
    return client


def test_a_draft_applies_while_its_context_fits_and_not_a_token_beyond(
        client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    draft = speculate(client, sid)
    line = draft["tokensAfter"] + grow(client, sid)  # what applying it now would leave
    fits = RESERVE + line  # an agent window whose threshold is exactly that
    assert check(client, sid, fits).status == "valid"
    stale = check(client, sid, fits - 1)
    assert stale.status == "stale" and draft_of(client, sid) == draft  # kept, to be extended
    assert check(client, sid, fits, ahead=1).status == "stale"  # growth still to come counts
    handle = client.compact(sid, reason="threshold", context_window=fits)
    assert handle.from_draft
    record = handle.record()
    assert record.result is not None and record.result["tokensAfter"] == line
    assert record.draft_usage == TokenUsage.model_validate(draft["usage"])
    assert record.draft_usage is not None and record.draft_usage.input > 0 and not record.usage
    [end] = completions(client, sid, handle.id)
    assert end.draft_usage == record.draft_usage


def test_a_draft_that_does_not_fit_is_extended_by_the_job_that_runs_instead(
        client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    draft = speculate(client, sid)
    window = RESERVE + draft["tokensAfter"] + grow(client, sid) - 1
    since = len(model.prompts)
    handle = client.compact(sid, reason="threshold", context_window=window)
    assert not handle.from_draft
    assert isinstance(handle.wait(30), dict)
    assert [e.error for e in session_events(client, sid)
            if e.type.value == "draft_discarded"] == ["grown"]
    record = handle.record()
    assert record.draft_discarded == "grown"
    assert record.result is not None and record.result["extendedDraft"] == draft["jobId"]
    # Its own tokens are the job's usage; the draft it built on is counted apart.
    assert record.draft_usage == TokenUsage.model_validate(draft["usage"])
    prompts = job_prompts(model, since)
    assert f"<previous-summary>\n{summary_core(draft)}" in prompts
    assert "meanwhile 0" in prompts and FIRST_REQUEST not in prompts


@pytest.mark.parametrize(("change", "cause"), [("navigate", "offpath"),
                                                ("compact", "compacted")])
def test_a_draft_is_dropped_when_its_prefix_changed_or_a_compaction_came_since(
        client: CompactionClient, demo_text: str, change: str, cause: str) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    if change == "navigate":
        snap = client.sessions.load(sid)
        client.sessions.navigate(sid, snap.session.tree().path_to(snap.leaf_id)[-3].id)
        client.sessions.append(sid, msg("let me rephrase that"))
    else:
        assert isinstance(client.compact(sid, reason="manual").wait(30), dict)
    outcome = check(client, sid, HUGE_WINDOW)  # it would fit any window: the prefix decides
    assert (outcome.status, outcome.cause) == ("discarded", cause)
    assert draft_of(client, sid) is None
    handle = client.compact(sid, reason="threshold", context_window=HUGE_WINDOW)
    assert not handle.from_draft
    handle.wait(30)
    assert "extendedDraft" not in (handle.record().result or {})


def test_a_stale_draft_is_extended_not_redone(client: CompactionClient, model: ModelServer,
                                              demo_text: str) -> None:
    sid = new_session(client, demo_text)
    first = speculate(client, sid)
    window = RESERVE + first["tokensAfter"] + grow(client, sid)  # it fits now, exactly ...
    threshold = window - RESERVE
    since = len(model.prompts)
    done = client.observe(sid, context_tokens=threshold - 1, context_window=window)
    # ... but not once the last token before the threshold is in: observe extends it now.
    assert done.action == "precompute" and done.handle is not None and not done.draft_ready
    assert done.handle.wait(30) is None
    second = draft_of(client, sid)
    assert second is not None and second["baseJobId"] == first["jobId"]
    record = client.jobs.get(second["jobId"])
    assert record.result is not None and record.result["extendedDraft"] == first["jobId"]
    own = record.draft_usage  # a speculative job's tokens are draft tokens, counted apart
    assert own is not None and own == record.usage
    assert second["usage"]["input"] == first["usage"]["input"] + own.input
    # The update reads the new span only: a fraction of what the first draft read.
    prompts = job_prompts(model, since)
    assert f"<previous-summary>\n{summary_core(first)}" in prompts
    assert "meanwhile 0" in prompts and FIRST_REQUEST not in prompts
    assert own.input < first["usage"]["input"] / 4
    applied = client.compact(sid, reason="threshold", context_window=HUGE_WINDOW)
    assert applied.from_draft
    assert applied.record().draft_usage == TokenUsage.model_validate(second["usage"])


@pytest.mark.parametrize(("draft_s", "action"), [(10.0, "precompute"), (0.0, "none")])
def test_observe_times_the_draft_by_the_agents_pace(module_redis: str, app: CompactorCelery,
                                                    demo_text: str, draft_s: float,
                                                    action: str) -> None:
    # 200k window: threshold 183 616, band from 160 664, horizon from 91 808. A fast agent
    # (three steps of 10k in milliseconds) projects past the band when a draft takes 10 s.
    settings = ClientSettings(redis_url=module_redis, precompute_draft_s=draft_s)
    with CompactionClient(settings) as client:
        sid = new_session(client, demo_text)
        for tokens in (100_000, 110_000, 120_000):
            assert client.observe(sid, context_tokens=tokens, context_window=200_000).action \
                == "none"
        done = client.observe(sid, context_tokens=130_000, context_window=200_000)
        assert done.action == action
        if done.handle is None:
            return
        again = client.observe(sid, context_tokens=131_000, context_window=200_000)
        # never two drafts computing: the same job, or its draft already ready
        assert again.draft_ready or (again.handle is not None
                                     and again.handle.id == done.handle.id)
        assert done.handle.wait(30) is None
        ready = client.observe(sid, context_tokens=132_000, context_window=200_000)
        assert (ready.action, ready.draft_ready) == ("none", True)  # it still fits: no more
