"""The package surface: public names, cheap import, settings, should_compact, routing."""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import re
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest

import api_client
from api_client import ClientSettings, CompactReason, JobKind, should_compact
from api_client.contract import routing
from api_client.contract.routing import route_for

PUBLIC = {
    # the clients, their handles and results
    "AsyncCompactionClient", "AsyncJobHandle", "CompactionClient", "JobHandle", "JobResult",
    "CompactReason", "EventType", "JobEvent", "JobKind", "JobRecord", "JobState", "PruneResult",
    # what client.sessions and client.events() hand out (for type hints)
    "AsyncEventReader", "AsyncSessionStore", "EventReader", "SessionStore", "Snapshot",
    "SessionPage",  # sessions.list() (issue 30)
    "LlmContext", "ClientSettings", "is_context_overflow", "should_compact",
    # instant compaction (docs/instant-compaction.md)
    "ObserveResult", "should_precompute",
    "DayUsage",  # client.usage(): a tenant's model spend per UTC day (docs/tenants.md)
    "AgentSettings",  # compact(agent=...): the agent's compaction settings (issue 38)
    # the errors
    "AlreadyCompactedError", "BrokerUnavailableError", "ClientError", "CompactorError",
    "ConfigurationError", "DanglingParentError", "EntryExistsError", "EntryNotFoundError",
    "HookError", "InvalidIdError", "InvalidRequestError", "JobCancelledError",
    "JobConflictError", "JobError", "JobFailedError", "JobNotFoundError", "JobTimeoutError",
    "ModelError", "NoWorkerError", "NothingToCompactError", "PlanError", "SessionCycleError",
    "SessionError",
    "QuotaExceededError",  # a tenant over a quota (docs/tenants.md)
    "CompactionLoopError",  # the loop guard (docs/instant-compaction.md)
    "SessionExistsError", "SessionFormatError", "SessionNotFoundError", "StaleSnapshotError",
    "InvalidEntryError", "InvalidTextError", "MessageSchemaError", "NestingTooDeepError",
    "NonFiniteNumberError", "UnsafeEntryIdError", "UnserializableValueError",
    # bounds and a full Redis (issue 33)
    "LimitExceededError", "EntryTooLargeError", "AppendTooLargeError", "InstructionsTooLongError",
    "SessionTooLargeError", "AppendUnconfirmedError", "StorageFullError",
    "RedisAuthenticationError", "StorageReadOnlyError",
}


def test_public_names_are_pinned() -> None:
    assert set(api_client.__all__) == PUBLIC
    assert len(api_client.__all__) == len(PUBLIC)


# What each public name that is not an error is: its kind and the module that defines it, stated
# here rather than read from the package's lazy-import table.
ORIGIN: dict[str, tuple[str, str]] = {
    "AsyncCompactionClient": ("class", "api_client.client.async_client"),
    "CompactionClient": ("class", "api_client.client.sync_client"),
    "AsyncJobHandle": ("class", "api_client.client.handles"),
    "JobHandle": ("class", "api_client.client.handles"),
    "ObserveResult": ("class", "api_client.client.handles"),
    "AsyncEventReader": ("class", "api_client.client.event_readers"),
    "EventReader": ("class", "api_client.client.event_readers"),
    "AsyncSessionStore": ("class", "api_client.client.sessions"),
    "SessionStore": ("class", "api_client.client.sessions"),
    "SessionPage": ("class", "api_client.client.session_listing"),
    "Snapshot": ("class", "api_client.contract.snapshots"),
    "LlmContext": ("class", "api_client.contract.session.context"),
    "should_compact": ("function", "api_client.client.thresholds"),
    "should_precompute": ("function", "api_client.client.thresholds"),
    "is_context_overflow": ("function", "api_client.contract.overflow"),
    "CompactReason": ("enum", "api_client.contract.job_enums"),
    "EventType": ("enum", "api_client.contract.job_enums"),
    "JobKind": ("enum", "api_client.contract.job_enums"),
    "JobState": ("enum", "api_client.contract.job_enums"),
    "JobEvent": ("model", "api_client.contract.wire"),
    "JobRecord": ("model", "api_client.contract.wire"),
    "PruneResult": ("model", "api_client.contract.wire"),
    "AgentSettings": ("model", "api_client.contract.agent_settings"),
    "ClientSettings": ("model", "api_client.contract.settings"),
    "DayUsage": ("model", "api_client.contract.usage"),
}
ERRORS_MODULE = "api_client.contract.errors"


def _documented_error_tree() -> dict[str, tuple[str, bool]]:
    """name -> (parent, also a ValueError), read from the tree drawn in errors.py's docstring."""
    errors = importlib.import_module(ERRORS_MODULE)
    parents: dict[str, str] = {}
    said: dict[str, str] = {}  # an error's description, over its continuation lines
    path: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        drawn = re.match(r"^ {4}([│ ]*[├└]── )?([A-Z]\w*Error)\b(.*)$", line)
        if drawn is None:
            if path:
                said[path[-1]] += " " + line.strip(" │")
            continue
        depth = len(drawn.group(1) or "") // 4
        del path[depth:]
        parents[drawn.group(2)] = path[-1] if path else "Exception"
        said[drawn.group(2)] = drawn.group(3)
        path.append(drawn.group(2))

    def value_error(name: str) -> bool:  # said of it, or of an ancestor
        return ((name in said and "(also ValueError)" in " ".join(said[name].split()))
                or (name in parents and value_error(parents[name])))

    return {name: (parent, value_error(name)) for name, parent in parents.items()}


def test_the_names_are_split_between_the_two_tables() -> None:
    errors = {name for name in PUBLIC if name.endswith("Error")}
    assert errors <= set(_documented_error_tree())
    assert set(ORIGIN) | errors | {"JobResult"} == PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_is_what_it_claims(name: str) -> None:
    value = getattr(api_client, name)
    if name == "JobResult":  # what wait() returns: an entry, a prune's result, or nothing
        assert set(typing.get_args(value)) == {dict[str, typing.Any], api_client.PruneResult,
                                               type(None)}
        return
    if name.endswith("Error"):
        parent, also_value_error = _documented_error_tree()[name]
        kind, module = "error", ERRORS_MODULE
        assert parent in [base.__name__ for base in value.__bases__]
        assert issubclass(value, ValueError) == also_value_error
        assert issubclass(value, api_client.CompactorError)
    else:
        kind, module = ORIGIN[name]
    assert value.__name__ == name and value.__module__ == module
    assert getattr(importlib.import_module(module), name) is value
    checks: dict[str, Callable[[Any], bool]] = {
        "class": inspect.isclass, "error": lambda v: issubclass(v, Exception),
        "function": inspect.isfunction, "enum": lambda v: issubclass(v, enum.Enum),
        "model": lambda v: issubclass(v, pydantic.BaseModel)}
    assert checks[kind](value), f"{name} is not a {kind}"


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError):
        api_client.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c",
         f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parent,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


HEAVY = ("worker", "tiktoken", "httpx", "redis", "celery", "kombu", "pydantic")


@pytest.mark.parametrize(
    ("code", "allowed"),
    [
        ("import api_client", ()),
        ("from api_client import should_compact, is_context_overflow", ()),
        ("from api_client import CompactionClient", ("redis", "pydantic")),
    ],
)
def test_importing_the_client_stays_cheap(code: str, allowed: tuple[str, ...]) -> None:
    loaded = {m.split(".")[0] for m in _modules_after(code)}
    assert sorted(set(HEAVY) - set(allowed) & loaded) == []


@pytest.mark.parametrize(
    ("tokens", "window", "settings", "due"),
    [
        (100_000, 128_000, None, False),
        (111_616, 128_000, None, False),          # exactly window - reserve: not strictly greater
        (111_617, 128_000, None, True),
        (200_000, 0, None, False),                 # Q16: unknown window never triggers
        (200_000, -1, None, False),
        (0, 16_384, None, False),                  # window == reserve: 0 > 0 is false
        (1, 16_384, None, True),
        (0, 10_000, None, True),                   # reserve above the window: always due
        (50_001, 60_000, ClientSettings(reserve_tokens=10_000), True),
        (50_000, 60_000, ClientSettings(reserve_tokens=10_000), False),
        (999_999, 60_000, ClientSettings(compaction_enabled=False), False),
    ],
)
def test_should_compact(tokens: int, window: int, settings: ClientSettings | None,
                        due: bool) -> None:
    assert should_compact(tokens, window, settings) is due


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("COMPACTOR_KEY_PREFIX=fromfile\nCOMPACTOR_RESERVE_TOKENS=5\n")
    monkeypatch.setenv("COMPACTOR_REDIS_URL", "redis://example:6379/2")
    monkeypatch.setenv("COMPACTOR_RESERVE_TOKENS", "7")
    s = ClientSettings()
    assert (s.redis_url, s.key_prefix, s.reserve_tokens) == (
        "redis://example:6379/2", "fromfile", 7)
    assert s.resolved_broker_url == s.resolved_result_backend == "redis://example:6379/2"
    monkeypatch.setenv("COMPACTOR_BROKER_URL", "redis://broker:6379/0")
    assert ClientSettings().resolved_broker_url == "redis://broker:6379/0"
    assert ClientSettings().connect_timeout_s + ClientSettings().socket_timeout_s <= 2.0


@pytest.mark.parametrize("prefix", ["", "a{b}", "has space"])
def test_settings_reject_prefixes_that_break_hash_tags(prefix: str) -> None:
    with pytest.raises(ValueError, match="key_prefix"):
        ClientSettings(key_prefix=prefix)


@pytest.mark.parametrize(
    ("kind", "reason", "queue", "priority"),
    [
        ("compact", "overflow", "compactor.urgent", 0),
        ("compact", "threshold", "compactor.compact", 3),
        ("compact", "manual", "compactor.compact", 6),
        ("compact", None, "compactor.compact", 6),
        ("prune", None, "compactor.prune", 6),
        ("branch_summary", None, "compactor.branch", 3),
    ],
)
def test_routes(kind: str, reason: str | None, queue: str, priority: int) -> None:
    route = route_for(JobKind(kind), CompactReason(reason) if reason else None)
    assert (route.queue, route.priority) == (queue, priority)
    assert priority in routing.BROKER_TRANSPORT_OPTIONS["priority_steps"]
    assert route.queue in routing.QUEUES and route.task in routing.TASK_NAMES.values()


def test_from_env_builds_a_working_client(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("COMPACTOR_REDIS_URL", redis_url)
    monkeypatch.setenv("COMPACTOR_KEY_PREFIX", "envprefix")
    with api_client.CompactionClient.from_env(send_sent_event=False) as client:
        assert client.ping()
        sid = client.sessions.create("s1")
        handle = client.compact(sid)
        assert client.redis.exists("envprefix:session:{s1}:header")
        assert handle.record().state is api_client.JobState.QUEUED
