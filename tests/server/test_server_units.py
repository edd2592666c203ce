"""The HTTP API's pure parts: every typed error has a status and a stable code, the token table
(constant-time lookup, start checks), the chat-completions prompt, the checked-in OpenAPI."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from api_client.contract import errors
from api_client.contract.errors import (
    CompactionLoopError,
    ConfigurationError,
    EntryExistsError,
    InvalidRequestError,
    JobConflictError,
    MessageSchemaError,
    SessionFormatError,
)
from api_client.server.auth import TokenTable, check_start, is_loopback
from api_client.server.model_routes import chat_prompts
from api_client.server.problems import PROBLEMS, error_body, problem_for, retry_after_s
from api_client.server.schemas import ChatMessage

REPO = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef-token"


def test_every_class_of_the_error_tree_has_its_own_row() -> None:
    tree = {obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, errors.CompactorError)}
    assert tree == set(PROBLEMS), "give each new error its status and code in problems.PROBLEMS"
    codes = [p.code for p in PROBLEMS.values()]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize(("err", "status", "code"), [
    (errors.SessionNotFoundError("Session s not found"), 404, "session_not_found"),
    (errors.EntryNotFoundError("e1"), 404, "entry_not_found"),
    (errors.JobNotFoundError("s:0123456789abcdef"), 404, "job_not_found"),
    (errors.SessionExistsError("Session s already exists"), 409, "session_exists"),
    (EntryExistsError("e1"), 409, "entry_exists"),
    (JobConflictError("in flight", job_id="s:0123456789abcdef"), 409, "job_conflict"),
    (MessageSchemaError("no role", source="x"), 422, "message_schema"),
    (SessionFormatError("bad line", source="x", line=3), 422, "session_format"),
    (errors.InvalidIdError("bad id"), 400, "invalid_id"),
    (InvalidRequestError("bad"), 400, "invalid_request"),
    (errors.BrokerUnavailableError("Redis unavailable"), 503, "broker_unavailable"),
    (errors.JobFailedError("model down"), 502, "job_failed"),
    (CompactionLoopError("loop", count=3, limit=3, window_s=600.0), 429, "compaction_loop"),
    (errors.JobTimeoutError("late"), 504, "job_timeout"),
    (errors.NothingToCompactError(), 409, "nothing_to_compact"),
    (errors.StorageFullError("OOM"), 507, "storage_full"),
    (errors.PromptTooLargeError("p", setting="max_prompt_tokens", limit=1, value=2), 413,
     "prompt_too_large"),
])
def test_problem_rows(err: Exception, status: int, code: str) -> None:
    assert (problem_for(err).status, problem_for(err).code) == (status, code)
    got_status, body = error_body(err)
    assert got_status == status and body["code"] == code and body["status"] == status
    assert body["type"] == f"urn:compactor:problem:{code}" and body["detail"] == str(err)


def test_a_problem_carries_what_the_error_knows_and_a_foreign_error_only_its_type() -> None:
    _, body = error_body(JobConflictError("in flight", job_id="s:0123456789abcdef"))
    assert body["jobId"] == "s:0123456789abcdef"
    _, body = error_body(SessionFormatError("bad", source="PUT s", line=7))
    assert body["line"] == 7
    _, body = error_body(CompactionLoopError("loop", count=4, limit=3, window_s=600.0))
    assert (body["count"], body["limit"], body["windowS"]) == (4, 3, 600.0)
    status, body = error_body(KeyError("secret session text"))
    assert status == 500 and body["code"] == "internal_error"
    assert "secret" not in json.dumps(body)


def test_every_429_of_the_error_tree_says_when_to_come_back() -> None:
    """A 429 from a typed error carries Retry-After (before: only the guards' 429s had it):
    a per-day quota until its resetsAt, a quota that frees when jobs start or sessions go a
    fixed while, the loop guard its window."""
    assert {cls for cls, p in PROBLEMS.items() if p.status == 429} == {
        errors.QuotaExceededError, CompactionLoopError}
    day = errors.QuotaExceededError("t", quota="tokens_per_day", limit=1, value=2,
                                    resets_at="2026-01-02T00:00:00Z")
    assert retry_after_s(day, now=1_767_312_000.0 - 90.5) == 91
    assert retry_after_s(day, now=1_767_312_000.0 + 5) == 1  # already past: at least 1
    queued = errors.QuotaExceededError("t", quota="queued_jobs", limit=1, value=1)
    stored = errors.QuotaExceededError("t", quota="stored_bytes", limit=1, value=2)
    assert (retry_after_s(queued), retry_after_s(stored)) == (5, 60)
    assert retry_after_s(CompactionLoopError("loop", count=4, limit=3, window_s=599.2)) == 600
    assert retry_after_s(InvalidRequestError("bad")) is None


def _table(tokens: dict[str, str] | None) -> TokenTable:
    return TokenTable.parse(None if tokens is None else SecretStr(json.dumps(tokens)))


def test_tokens_map_to_their_tenant_and_nothing_else_does() -> None:
    table = _table({TOKEN: "default", TOKEN + "2": "acme"})
    assert table.tenant(TOKEN) == "default" and table.tenant(TOKEN + "2") == "acme"
    assert table.tenants() == ["acme", "default"]
    assert table.tenant(TOKEN[:-1]) is None and table.tenant("") is None
    assert TOKEN not in repr(table)  # only digests are kept


@pytest.mark.parametrize(("raw", "problem"), [
    ("not json", "is not JSON"),
    ("[]", "non-empty JSON object"),
    ("{}", "non-empty JSON object"),
    ('{"short": "default"}', "16 characters"),
    (json.dumps({TOKEN: "Acme"}), "tenant 'Acme': 1-63 characters"),
    (json.dumps({TOKEN: 7}), "tenant 7"),
])
def test_bad_token_tables_are_refused_in_one_line(raw: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        TokenTable.parse(SecretStr(raw))


@pytest.mark.parametrize(("tokens", "host", "insecure", "problem"), [
    ({TOKEN: "default"}, "0.0.0.0", False, None),
    (None, "127.0.0.1", True, None),
    (None, "::1", True, None),
    (None, "localhost", True, None),
    (None, "127.0.0.1", False, "no API token"),
    (None, "0.0.0.0", True, "only on a loopback address"),
    (None, "10.1.2.3", True, "only on a loopback address"),
    ({TOKEN: "default"}, "127.0.0.1", True, "drop one"),
])
def test_the_server_refuses_to_start_open_beyond_loopback(
        tokens: dict[str, str] | None, host: str, insecure: bool, problem: str | None) -> None:
    if problem is None:
        check_start(_table(tokens), host, insecure)
    else:
        with pytest.raises(ConfigurationError, match=problem):
            check_start(_table(tokens), host, insecure)


def test_loopback() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")


def test_chat_messages_become_a_system_prompt_and_a_prompt() -> None:
    oh_my_pi = [ChatMessage(role="system", content="You summarize."),
                ChatMessage(role="user", content=[{"type": "text", "text": "<conversation>"}])]
    assert chat_prompts(oh_my_pi) == ("You summarize.", "<conversation>")
    dialog = [ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")]
    assert chat_prompts(dialog) == ("", "user: a\n\nassistant: b")
    with pytest.raises(InvalidRequestError):
        chat_prompts([ChatMessage(role="system", content="only")])


def test_the_checked_in_openapi_document_is_the_servers() -> None:
    from api_client.server.openapi_doc import render

    checked_in = (REPO / "docs" / "openapi.json").read_text(encoding="utf-8")
    assert checked_in == render(), (
        "docs/openapi.json is stale: .venv/bin/python -m api_client.server.openapi_doc "
        "docs/openapi.json")


def test_the_document_lists_every_route_the_tools_rely_on() -> None:
    paths = json.loads((REPO / "docs" / "openapi.json").read_text(encoding="utf-8"))["paths"]
    routes = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    sid = "/v1/sessions/{session_id}"
    assert routes == {
        ("POST", "/v1/sessions"), ("GET", sid), ("DELETE", sid), ("GET", sid + "/jsonl"),
        ("PUT", sid + "/jsonl"), ("GET", sid + "/context"), ("POST", sid + "/entries"),
        ("PUT", sid + "/leaf"),
        ("POST", sid + "/compact"), ("POST", sid + "/prune"), ("POST", sid + "/branch-summary"),
        ("GET", "/v1/jobs/{job_id}"), ("POST", "/v1/jobs/{job_id}/cancel"),
        ("GET", sid + "/events"), ("GET", "/v1/events"), ("POST", "/v1/summarize"),
        ("POST", "/v1/summarize/{url_secret}"), ("POST", "/v1/chat/completions"),
        ("GET", "/livez"), ("GET", "/readyz"),
        ("GET", "/v1/usage"), ("GET", "/v1/workers"),
    }
