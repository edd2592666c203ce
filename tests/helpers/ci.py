"""A test whose tool or service is missing here skips, saying what is missing; in CI (env ``CI``
set) it fails instead, so a green CI never hides a test that did not run. ``.ci/run`` installs
and starts what these tests need, and says so when it cannot."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def missing(what: str) -> NoReturn:
    """Skip the test because ``what`` is missing here; fail it in CI."""
    if in_ci():
        pytest.fail(f"{what} (required in CI: .ci/run installs and starts it)", pytrace=False)
    pytest.skip(what)
