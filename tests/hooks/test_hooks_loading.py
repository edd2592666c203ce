"""Loading hooks: the installed example plugin's entry point, module:object paths, bad ones."""

from __future__ import annotations

import logging
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from worker.hooks import EVENTS, HookLoadError, HookSettings, load_hook_runner
from worker.hooks.loading import ENTRY_POINT_GROUP, hook_settings


def test_entry_point_of_installed_plugin_is_loaded(caplog: pytest.LogCaptureFixture,
                                                   example_plugin: Any) -> None:
    caplog.set_level(logging.INFO, logger="worker.hooks")
    runner = load_hook_runner(HookSettings(entry_points=["example"]))
    for event in EVENTS:
        assert "example" in [impl.plugin_name for impl in runner.implementations(event)]
    assert "hook plugins loaded: example" in caplog.text
    assert "hooks for session_before_compact: example" in caplog.text


def test_entry_points_can_be_switched_off() -> None:
    runner = load_hook_runner(HookSettings(entry_points=False))
    assert not any(runner.has_hooks(event) for event in EVENTS)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _module(where: Path, name: str, body: str) -> None:
    (where / f"{name}.py").write_text(textwrap.dedent(body))


GOOD = """
    from worker.hooks import hookimpl

    class Plugin:
        @hookimpl
        def session_compacting(self):
            return {"prompt": "from class"}

    @hookimpl
    def session_compacting():
        return {"prompt": "from module"}

    instance = Plugin()
"""


@pytest.mark.parametrize(
    ("path", "prompt"),
    [
        ("hk_good", "from module"),
        ("hk_good:Plugin", "from class"),
        ("hk_good:instance", "from class"),
    ],
)
def test_module_object_paths(plugin_dir: Path, path: str, prompt: str) -> None:
    _module(plugin_dir, "hk_good", GOOD)
    runner = load_hook_runner(HookSettings(entry_points=False, plugins=[path]))
    result = runner.compacting("s", [])
    assert result is not None and result.prompt == prompt


BAD_MODULES = {
    "hk_typo": """
        from worker.hooks import hookimpl

        @hookimpl
        def session_compacted():
            pass
    """,
    "hk_extra_arg": """
        from worker.hooks import hookimpl

        @hookimpl
        def session_compact(compaction_entry, model):
            pass
    """,
    "hk_nothing": """
        def session_compact(compaction_entry):
            pass
    """,
    "hk_broken": """
        import no_such_dependency_for_hooks
    """,
    "hk_init_fails": """
        from worker.hooks import hookimpl

        class Plugin:
            def __init__(self):
                raise RuntimeError("no config")

            @hookimpl
            def session_compact(self):
                pass
    """,
    "hk_wrapper": """
        from worker.hooks import hookimpl

        @hookimpl(wrapper=True)
        def session_compacting():
            return (yield)
    """,
}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("hk_no_such_module:plugin", "cannot import hk_no_such_module"),
        ("hk_typo", "unknown hook"),
        ("hk_extra_arg", "model"),
        ("hk_nothing", "defines no compactor hooks"),
        ("hk_broken", "no_such_dependency_for_hooks"),
        ("hk_init_fails:Plugin", "cannot instantiate: no config"),
        ("hk_wrapper", "wrappers are not supported"),
        ("hk_nothing:missing", "has no missing"),
        (":plugin", "not of the form module:object"),
    ],
)
def test_bad_plugin_refuses_to_load(plugin_dir: Path, path: str, message: str) -> None:
    for name, body in BAD_MODULES.items():
        _module(plugin_dir, name, body)
    with pytest.raises(HookLoadError, match=message):
        load_hook_runner(HookSettings(entry_points=False, plugins=[path]))


def test_broken_entry_point_refuses_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = metadata.EntryPoint(name="broken", value="hk_not_installed:plugin",
                                 group=ENTRY_POINT_GROUP)

    def entry_points(**kwargs: Any) -> Any:
        assert kwargs == {"group": ENTRY_POINT_GROUP}
        return [broken]

    monkeypatch.setattr("worker.hooks.loading.metadata.entry_points", entry_points)
    with pytest.raises(HookLoadError, match="hook entry point broken = hk_not_installed:plugin"):
        load_hook_runner(HookSettings(entry_points=["broken"]))


def test_same_plugin_twice_is_loaded_once(plugin_dir: Path) -> None:
    _module(plugin_dir, "hk_good", GOOD)
    runner = load_hook_runner(HookSettings(entry_points=False, plugins=["hk_good", "hk_good"]))
    assert len(runner.implementations("session_compacting")) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [("a.b:c, d:e", ["a.b:c", "d:e"]), ('["x:y"]', ["x:y"]), ("", []), ("solo", ["solo"])],
)
def test_plugins_setting_from_environment(monkeypatch: pytest.MonkeyPatch, value: str,
                                          expected: list[str]) -> None:
    monkeypatch.setenv("COMPACTOR_HOOKS_PLUGINS", value)
    monkeypatch.setenv("COMPACTOR_HOOKS_TIMEOUT_S", "2.5")
    monkeypatch.setenv("COMPACTOR_HOOKS_WEBHOOK_SECRET", "hush")
    settings = HookSettings()
    assert settings.plugins == expected
    assert settings.timeout_s == 2.5
    assert "hush" not in repr(settings)


def test_settings_embedded_in_worker_settings() -> None:
    class WorkerSettings:
        hooks = HookSettings(entry_points=False, timeout_s=3)

    assert hook_settings(WorkerSettings()).timeout_s == 3
    assert hook_settings({"timeout_s": 4}).timeout_s == 4
    assert load_hook_runner(WorkerSettings()).timeout_s == 3
    with pytest.raises(TypeError):
        hook_settings(42)


@pytest.mark.integration
def test_worker_refuses_to_start_with_a_missing_hook(redis_url: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "COMPACTOR_REDIS_URL": redis_url,
           "COMPACTOR_HOOKS_PLUGINS": "hk_missing_platform_hooks:plugin"}
    done = subprocess.run([sys.executable, "-m", "worker", "worker"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert ("hook plugin 'hk_missing_platform_hooks:plugin': cannot import "
            "hk_missing_platform_hooks") in done.stderr
