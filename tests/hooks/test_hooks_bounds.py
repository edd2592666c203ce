"""Hooks are bounded (issue 33, finding 4): each call ends at its deadline (not only the wait
for it), a webhook's answer is read up to a cap, the calls in flight come from a bounded pool,
and installed plugins run only when named.

Before: a webhook trickling 1 byte/s kept its thread after the runner's deadline (httpx's
per-read timeout never fired); 50 calls to a hanging plugin left 50 threads; a 100 MB webhook
answer was read whole (RSS 44 → 446 MB); every installed entry point was loaded by default.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import pytest
from hooks.hookkit import runner_with
from pydantic import SecretStr, ValidationError

from helpers.hostile_http import (
    MB,
    HostileServer,
    deep_json,
    echo,
    gzip_bomb,
    huge,
    json_answer,
    trickle,
)
from worker.hooks import HookLoadError, HookRunner, HookSettings, hookimpl, load_hook_runner
from worker.hooks.loading import ENTRY_POINT_GROUP
from worker.hooks.runner import HookCallEnded

_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _earlier_hook_threads() -> None:
    """Hook threads of earlier tests (a plugin asleep in C lives on) are not this test's."""
    _EARLIER.clear()
    _EARLIER.update(threading.enumerate())


def _hook_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name.startswith("hook-") and t.is_alive() and t not in _EARLIER]


def _until(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def server() -> Iterator[HostileServer]:
    srv = HostileServer()
    yield srv
    srv.close()


def _webhook(server: HostileServer, **settings: Any) -> HookRunner:
    return load_hook_runner(HookSettings(webhook_url=server.url + "/hooks",
                                         webhook_secret=SecretStr("s3cret"), **settings))


# --- webhook ----------------------------------------------------------------------------------
def test_a_trickling_webhook_is_cut_off_at_its_deadline_and_frees_its_thread(
        server: HostileServer, caplog: pytest.LogCaptureFixture) -> None:
    server.default = trickle(b'{"context": ["one line"]}', interval_s=1.0)
    runner = _webhook(server, webhook_timeout_s=0.5, timeout_s=5.0)
    started = time.monotonic()
    assert runner.compacting("s", []) is None  # the default applies
    assert time.monotonic() - started < 1.5
    assert _until(lambda: not _hook_threads(), 1.0), _hook_threads()
    server.wait_answered(1, timeout=3)
    assert server.hung_up == [True] and server.sent[0] < 5  # a byte or two, then cut off
    assert "no whole answer within 0.5 s (COMPACTOR_HOOKS_WEBHOOK_TIMEOUT_S" in caplog.text


@pytest.mark.parametrize("answer", [huge(100 * MB), gzip_bomb(100 * MB)],
                         ids=["100 MB", "gzip bomb"])
def test_a_huge_webhook_answer_is_abandoned_at_the_cap(
        server: HostileServer, caplog: pytest.LogCaptureFixture, answer: Any) -> None:
    server.default = answer
    tracemalloc.start()
    try:
        assert _webhook(server).compacting("s", []) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MB
    assert "response over 1048576 bytes (COMPACTOR_HOOKS_WEBHOOK_MAX_RESPONSE_BYTES)" \
        in caplog.text


def test_a_webhook_answer_nested_100k_deep_is_a_failed_hook(
        server: HostileServer, caplog: pytest.LogCaptureFixture) -> None:
    server.default = deep_json(100_000)
    assert _webhook(server).compacting("s", []) is None
    assert "response is not JSON (JSON nested 65+ levels deep; the limit is 64)" in caplog.text
    assert "RecursionError" not in caplog.text


def test_a_webhook_answer_within_the_bounds_is_used(server: HostileServer) -> None:
    server.default = json_answer({"context": ["kept"]})
    result = _webhook(server).compacting("s", [])
    assert result is not None and result.context == ["kept"]


def test_a_webhook_error_quotes_no_credential(server: HostileServer,
                                              caplog: pytest.LogCaptureFixture) -> None:
    server.default = echo(500)
    runner = load_hook_runner(HookSettings(webhook_url=server.url.replace(
        "http://", "http://hook-user:hook-Pa55@") + "/h", webhook_secret=SecretStr("s")))
    assert runner.compacting("s", []) is None
    assert "hook-Pa55" not in repr(runner.manager.get_plugin("webhook"))
    assert "HTTP 500" in caplog.text and "hook-Pa55" not in caplog.text


# --- plugins ----------------------------------------------------------------------------------
class Looping:
    """Waits in Python (the usual shape of a hung plugin: polling, retrying, sleeping a bit)."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    @hookimpl
    def session_compacting(self) -> Any:
        try:
            while True:
                time.sleep(0.01)
        except HookCallEnded:
            self.ended.set()
            raise


class Blocked:
    """Blocked inside one C call: Python cannot end it before the call returns."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0

    @hookimpl
    def session_compacting(self) -> Any:
        self.started += 1
        self.release.wait()
        return {"context": ["late"]}


def test_a_plugin_past_its_deadline_is_ended_not_only_abandoned() -> None:
    plugin = Looping()
    runner = runner_with(plugin, timeout_s=0.2)
    assert runner.compacting("s", []) is None
    assert plugin.ended.wait(1.0)
    assert _until(lambda: not _hook_threads(), 1.0) and not runner.calls.live


def test_plugins_swallowing_exceptions_are_ended_too() -> None:
    class Stubborn:
        @hookimpl
        def session_compacting(self) -> Any:
            while True:
                try:
                    time.sleep(0.01)
                except Exception:  # what a careless plugin does
                    continue

    runner = runner_with(Stubborn(), timeout_s=0.2)
    assert runner.compacting("s", []) is None
    assert _until(lambda: not _hook_threads(), 1.0)


def test_fifty_calls_to_a_blocked_plugin_hold_at_most_the_pool(
        caplog: pytest.LogCaptureFixture) -> None:
    plugin = Blocked()
    runner = runner_with(plugin, timeout_s=0.02, max_calls=4)
    try:
        for _ in range(50):
            assert runner.compacting("s", []) is None
        assert plugin.started == 4 and len(_hook_threads()) == 4
        assert "all 4 hook call slots are held" in caplog.text
        assert "(COMPACTOR_HOOKS_MAX_CALLS)" in caplog.text
    finally:
        plugin.release.set()
    # the blocked calls end when their C call returns; their slots come back
    assert _until(lambda: not _hook_threads() and not runner.calls.live)
    plugin.release.clear()
    threading.Timer(0.05, plugin.release.set).start()
    runner.timeout_s = 2.0
    result = runner.compacting("s", [])
    assert result is not None and result.context == ["late"]


def test_a_cancelled_job_ends_its_hook_call() -> None:
    plugin = Looping()
    runner = runner_with(plugin, timeout_s=30)

    class Cancelled:
        def __init__(self) -> None:
            self.at = time.monotonic() + 0.2

        def is_cancelled(self) -> bool:
            return time.monotonic() >= self.at

    assert runner.compacting("s", [], cancel=Cancelled()) is None
    assert plugin.ended.wait(1.0)


# --- entry points -----------------------------------------------------------------------------
@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An installed entry point whose loading is recorded (nothing is imported)."""
    loaded: list[str] = []

    class Recorded(metadata.EntryPoint):
        def load(self) -> Any:
            loaded.append(self.name)

            class Plugin:
                @hookimpl
                def session_compacting(self) -> Any:
                    return {"prompt": "from the installed plugin"}

            return Plugin

    points = [Recorded(name="acme", value="acme_hooks", group=ENTRY_POINT_GROUP)]
    monkeypatch.setattr("worker.hooks.loading.metadata.entry_points", lambda **_: points)
    return loaded


def test_installed_plugins_are_not_loaded_unless_named(installed: list[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPACTOR_HOOKS_ENTRY_POINTS", raising=False)
    runner = load_hook_runner(HookSettings())
    assert installed == [] and not runner.has_hooks("session_compacting")
    runner = load_hook_runner(HookSettings(entry_points="acme"))
    assert installed == ["acme"] and runner.has_hooks("session_compacting")


def test_a_named_entry_point_that_is_not_installed_refuses_to_load(installed: list[str]) -> None:
    with pytest.raises(HookLoadError, match=r"'acmee' is not installed .*installed: acme"):
        load_hook_runner(HookSettings(entry_points=["acmee"]))


@pytest.mark.parametrize(("value", "names"), [
    ("", []), ("false", []), ("acme, other", ["acme", "other"]), ('["acme"]', ["acme"]),
])
def test_entry_points_setting(monkeypatch: pytest.MonkeyPatch, value: str,
                              names: list[str]) -> None:
    monkeypatch.setenv("COMPACTOR_HOOKS_ENTRY_POINTS", value)
    assert HookSettings().entry_points == names


def test_entry_points_true_no_longer_loads_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_HOOKS_ENTRY_POINTS", "true")
    with pytest.raises(ValidationError, match="name the entry points to load"):
        HookSettings()
