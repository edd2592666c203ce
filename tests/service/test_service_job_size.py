"""A compaction larger than ``max_job_tokens`` fails clearly before any hook or model call; one
within it runs (on in-memory ports, tests/service/service_fakes.py)."""

from __future__ import annotations

import pytest
from service.service_fakes import JOB_ID, world

from api_client.contract.job_enums import CompactReason
from worker.hooks import BeforeCompactResult
from worker.service import run_job


@pytest.mark.parametrize("reason", [CompactReason.MANUAL, CompactReason.THRESHOLD])
def test_a_compaction_over_the_token_bound_fails_before_any_model_call(
        reason: CompactReason) -> None:
    w = world(reason=reason, max_job_tokens=500)  # the conversation: 800 estimated tokens
    w.hooks.before_compact_result = BeforeCompactResult(cancel=True)  # must not even be asked
    outcome = run_job(w.rt, JOB_ID)
    assert outcome.state == "failed"
    assert outcome.error is not None and "COMPACTOR_MAX_JOB_TOKENS" in outcome.error
    assert "over the limit max_job_tokens = 500" in outcome.error
    assert w.summarizer.requests == [] and w.commits.calls in ([], ["rewrite"])


def test_a_compaction_within_the_bound_runs() -> None:
    w = world(reason=CompactReason.MANUAL, max_job_tokens=800)
    assert run_job(w.rt, JOB_ID).state == "succeeded"
    assert w.summarizer.requests
