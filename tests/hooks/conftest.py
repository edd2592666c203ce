"""Fixtures for the hook tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks.hookkit import make_path, make_preparation

from api_client.contract.session import Entry
from worker.compaction import Preparation


@pytest.fixture
def path() -> list[Entry]:
    return make_path()


@pytest.fixture
def preparation(path: list[Entry]) -> Preparation:
    return make_preparation(path)


# `make install-test-plugins` (part of `make test`) installs the example plugin here, not into
# the venv, so a developer's worker never loads it through its entry point.
TEST_PLUGINS = Path(__file__).resolve().parents[2] / "build" / "test-plugins"


@pytest.fixture(scope="module")
def example_plugin_path() -> Iterator[Path]:
    """Puts the example plugin (module and ``compactor.hooks`` entry point) on sys.path for one
    test module (a module's worker loads hooks once). Skips when it is not installed; fails
    instead when CI is set."""
    if not (TEST_PLUGINS / "compactor_example_plugin").is_dir():
        message = (f"example hook plugin not installed at {TEST_PLUGINS}: "
                   "run `make install-test-plugins` (`make test` does)")
        if os.environ.get("CI"):
            pytest.fail(message + " (required in CI)")
        pytest.skip(message)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(TEST_PLUGINS))
        yield TEST_PLUGINS


@pytest.fixture
def example_plugin(example_plugin_path: Path) -> Iterator[Any]:
    """The example plugin, reset before and after the test."""
    import compactor_example_plugin as plugin

    plugin.reset()
    yield plugin
    plugin.reset()
