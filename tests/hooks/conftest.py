"""Fixtures for the hook tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hooks.hookkit import make_path, make_preparation

from api_client.session import Entry
from worker.compaction import Preparation


@pytest.fixture
def path() -> list[Entry]:
    return make_path()


@pytest.fixture
def preparation(path: list[Entry]) -> Preparation:
    return make_preparation(path)


@pytest.fixture
def example_plugin() -> Iterator[Any]:
    """The installed example plugin, reset before and after the test."""
    try:
        import compactor_example_plugin as plugin
    except ImportError:
        pytest.fail("compactor-example-plugin is not installed: `make install` installs it, or "
                    "run .venv/bin/pip install -e examples/compactor-example-plugin")

    plugin.reset()
    yield plugin
    plugin.reset()
