"""A test whose tool or service is missing here skips, saying what is missing; in CI (env ``CI``
set) it fails instead, so a green CI never hides a test that did not run. ``.ci/run`` installs
and starts what these tests need, and says so when it cannot."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn, TypeVar

import pytest

from helpers.agent_rpc import AgentUnavailable

Install = TypeVar("Install")


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def missing(what: str) -> NoReturn:
    """Skip the test because ``what`` is missing here; fail it in CI."""
    if in_ci():
        pytest.fail(f"{what} (required in CI: .ci/run installs and starts it)", pytrace=False)
    pytest.skip(what)


def agent_installed(ensure: Callable[[], Install], agent: str) -> Install:
    """``ensure()``: the agent installed from npm (``make pi``, ``make omp``). When it cannot be,
    the test fails if npm's registry answered or in CI, and skips only when npm is unreachable."""
    try:
        return ensure()
    except AgentUnavailable as err:
        if err.npm_reachable or in_ci():
            pytest.fail(f"{agent} is not installed: {err}")
        pytest.skip(f"{agent} is not installed and npm's registry is unreachable ({err})")
