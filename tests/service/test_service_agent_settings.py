"""How a job resolves the request's agent settings against the worker's (issue 38 item 1):
field by field, the request's first (docs/compaction.md)."""

from __future__ import annotations

from typing import Any

import pytest

from api_client import AgentSettings
from worker.compaction import CompactionSettings
from worker.service._job_context import (
    agent_compaction_settings,
    branch_reserve_tokens,
    job_tokenizer,
)
from worker.tokens import EstimateTokenizer, TiktokenTokenizer, get_tokenizer

OWN = CompactionSettings(keep_recent_tokens=20_000, reserve_tokens=16_384)


@pytest.mark.parametrize(("agent", "keep", "reserve"), [
    (None, 20_000, 16_384),
    (AgentSettings(), 20_000, 16_384),
    (AgentSettings(keep_recent_tokens=3_000), 3_000, 16_384),
    (AgentSettings(reserve_tokens=4_000), 20_000, 4_000),
    (AgentSettings(keep_recent_tokens=3_000, reserve_tokens=4_000), 3_000, 4_000),
    (AgentSettings(tokenizer="estimate", summary_format="pi-1.6"), 20_000, 16_384),
])
def test_compaction_settings_fall_back_field_by_field(agent: Any, keep: int,
                                                      reserve: int) -> None:
    assert agent_compaction_settings(OWN, agent) == CompactionSettings(keep, reserve)


@pytest.mark.parametrize(("agent", "want"), [
    (None, 16_384), (AgentSettings(reserve_tokens=4_000), 16_384),
    (AgentSettings(branch_reserve_tokens=8_000), 8_000),
])
def test_the_branch_reserve(agent: Any, want: int) -> None:
    assert branch_reserve_tokens(16_384, agent) == want


@pytest.mark.parametrize(("own", "agent", "kind", "same"), [
    ("tiktoken", None, TiktokenTokenizer, True),
    ("tiktoken", AgentSettings(keep_recent_tokens=1), TiktokenTokenizer, True),
    ("tiktoken", AgentSettings(tokenizer="tiktoken"), TiktokenTokenizer, True),
    ("tiktoken", AgentSettings(tokenizer="estimate"), EstimateTokenizer, False),
    ("estimate", AgentSettings(tokenizer="estimate"), EstimateTokenizer, True),
    ("estimate", None, EstimateTokenizer, True),
])
def test_the_jobs_tokenizer(own: str, agent: Any, kind: type, same: bool) -> None:
    worker = get_tokenizer(own)
    chosen = job_tokenizer(worker, agent)
    assert isinstance(chosen, kind) and (chosen is worker) is same
    assert job_tokenizer(worker, agent) is chosen  # one per process: its counts are kept
