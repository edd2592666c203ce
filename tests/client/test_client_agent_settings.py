"""AgentSettings on the client side (issue 38 item 1), no Redis: the model's names and bounds, the
record field, the request check, the plan key a draft is matched by, and the lines a request's
reserve moves (the draft's fit line, the loop guard's line, observe's threshold)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from api_client import AgentSettings, ClientSettings, InvalidRequestError, JobRecord
from api_client.client.draft_apply import _call, fit_line, ineffective_above
from api_client.client.jobs import check_agent, enqueue_call
from api_client.client.speculation import agent_view
from api_client.contract.agent_settings import plan_key
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.keys import KeyLayout

SETTINGS = ClientSettings(reserve_tokens=16_384, loop_guard_share=0.5)
LAYOUT = KeyLayout("t")
FULL = {"reserveTokens": 4_000, "keepRecentTokens": 3_000, "tokenizer": "estimate",
        "summaryFormat": "pi-0.73", "summaryMaxTokens": 3_200, "turnPrefixMaxTokens": 2_000,
        "branchReserveTokens": 16_384}


def test_camel_case_on_the_wire_snake_case_in_python() -> None:
    agent = AgentSettings.model_validate(FULL)
    assert agent.keep_recent_tokens == 3_000 and agent.summary_format == "pi-0.73"
    assert agent.to_wire() == FULL
    assert AgentSettings(reserve_tokens=4_000).to_wire() == {"reserveTokens": 4_000}
    assert AgentSettings().to_wire() == {}


@pytest.mark.parametrize("raw", [
    {"reserveTokens": 0}, {"reserveTokens": -1}, {"keepRecentTokens": 10_000_001},
    {"reserveTokens": True}, {"reserveTokens": 4000.5}, {"reserveTokens": "4000"},
    {"tokenizer": "cl100k"}, {"summaryFormat": "pi-1.7"}, {"contextWindow": 32_000},
    {"reserve": 1},
])
def test_bounds_and_unknown_fields_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AgentSettings.model_validate(raw)


def test_the_record_stores_the_settings_as_one_json_field() -> None:
    agent = AgentSettings.model_validate(FULL)
    record = JobRecord(id="s:1", kind=JobKind.COMPACT, session_id="s", agent=agent)
    stored = record.to_redis()
    assert json.loads(stored["agent"]) == FULL
    assert JobRecord.from_redis(stored).agent == agent
    assert "agent" not in JobRecord(id="s:1", kind=JobKind.COMPACT, session_id="s").to_redis()


@pytest.mark.parametrize(("given", "want"), [
    (None, None),
    (AgentSettings(reserve_tokens=4_000), AgentSettings(reserve_tokens=4_000)),
    ({"reserveTokens": 4_000}, AgentSettings(reserve_tokens=4_000)),
    ({"reserve_tokens": 4_000}, AgentSettings(reserve_tokens=4_000)),
])
def test_check_agent_takes_the_model_or_a_mapping(given: Any, want: Any) -> None:
    assert check_agent(given) == want


@pytest.mark.parametrize("given", [{"reserveTokens": 4_000, "extra": 1}, {"reserveTokens": 0},
                                   "estimate", 4_000])
def test_check_agent_refuses_with_invalid_request(given: Any) -> None:
    with pytest.raises(InvalidRequestError):
        check_agent(given)


@pytest.mark.parametrize(("a", "b", "same"), [
    (None, None, True),
    (None, AgentSettings(), True),  # an empty object says nothing: the worker's own settings
    (AgentSettings(reserve_tokens=4_000, keep_recent_tokens=3_000),
     AgentSettings(keep_recent_tokens=3_000, reserve_tokens=4_000), True),
    (AgentSettings(reserve_tokens=4_000), None, False),
    (AgentSettings(keep_recent_tokens=3_000), AgentSettings(keep_recent_tokens=3_001), False),
    (AgentSettings(summary_format="pi-1.6"), AgentSettings(summary_format="pi-0.73"), False),
])
def test_plan_key_says_whether_two_plans_are_alike(a: Any, b: Any, same: bool) -> None:
    assert (plan_key(a) == plan_key(b)) is same


def test_enqueue_writes_the_settings_on_the_record() -> None:
    agent = AgentSettings(keep_recent_tokens=3_000)
    _, (named,), _ = enqueue_call(LAYOUT, SETTINGS, "s1", "compact", "manual", None, None,
                                  agent=agent)
    fields = json.loads(named)["fields"]  # the record's field/value pairs
    at = fields.index("agent")
    assert json.loads(fields[at + 1]) == {"keepRecentTokens": 3_000}
    _, (named,), _ = enqueue_call(LAYOUT, SETTINGS, "s1", "compact", "manual", None, None)
    assert "agent" not in json.loads(named)["fields"]


@pytest.mark.parametrize(("window", "reserve", "fit", "above"), [
    (None, None, None, None),
    (32_000, None, 32_000 - 16_384, (32_000 - 16_384) // 2),
    (32_000, 4_000, 28_000, 14_000),
    (3_000, 4_000, -1_000, None),  # a window under the reserve: no guard line
])
def test_the_requests_reserve_moves_the_lines(window: int | None, reserve: int | None,
                                              fit: int | None, above: int | None) -> None:
    assert fit_line(SETTINGS, window, reserve) == fit
    assert ineffective_above(SETTINGS, window, reserve) == above


def test_the_draft_call_carries_the_settings_and_their_key() -> None:
    agent = AgentSettings(reserve_tokens=4_000, summary_format="pi-1.6")
    script, _ = _call(LAYOUT, SETTINGS, "s1", CompactReason.THRESHOLD, "apply", 32_000,
                      agent=agent)
    assert script.args[17] == plan_key(agent) and script.args[3] == "28000"
    fields = json.loads(script.args[14])
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    assert json.loads(pairs["agent"]) == agent.to_wire()


@pytest.mark.parametrize(("agent", "reserve"), [
    (None, 16_384), (AgentSettings(keep_recent_tokens=1), 16_384),
    (AgentSettings(reserve_tokens=4_000), 4_000),
])
def test_observe_judges_the_threshold_with_the_agents_reserve(agent: Any, reserve: int) -> None:
    assert agent_view(SETTINGS, agent).reserve_tokens == reserve
    assert SETTINGS.reserve_tokens == 16_384  # never changed in place
