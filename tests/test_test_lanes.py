"""The test lanes: `integration` (tests/conftest.py) lands on the tests that need a server, by
fixture, by folder or by hand, and on no other, so `make test-unit` (`-m "not integration"`) runs
without Redis, a broker or a worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILES = ("tests/llm/test_llm_cooldown.py", "tests/test_readme.py",
         "tests/runtime/test_runtime_processes.py", "tests/hooks/test_hooks_loading.py")


def selected(marker: str) -> set[str]:
    """The test functions (no parameters) of FILES that `-m marker` selects."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", marker, *FILES], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line}


def test_integration_is_marked_by_fixture_folder_and_hand() -> None:
    integration = selected("integration")
    assert {
        "tests/llm/test_llm_cooldown.py::test_redis_store_shares_state_and_expires",  # redis_url
        "tests/llm/test_llm_cooldown.py::test_redis_outage_fails_open",  # own_redis
        "tests/runtime/test_runtime_processes.py::test_demo_runs_with_nothing_but_the_install",
        "tests/test_readme.py::test_block_runs",  # by hand: a module-local fixture starts Redis
        "tests/hooks/test_hooks_loading.py::test_worker_refuses_to_start_with_a_missing_hook",
    } <= integration
    unit = selected("not integration")
    assert {
        "tests/llm/test_llm_cooldown.py::test_memory_store_threshold_window_and_expiry",
        "tests/test_readme.py::test_readme_has_python_blocks",
    } <= unit
    assert not unit & integration
    assert not any(test.startswith("tests/runtime/") for test in unit)
