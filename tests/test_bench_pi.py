"""bench/bench_pi.py still runs: its quick mode (short latencies, one compaction per
conversation, pi 1.6) end to end, with the real pi, ``compactor serve`` and a default worker.
The figures are not checked (timings on shared cores are the benchmark's business), only that
every case compacted on both sides and the probe saw pi's own cut.

Skipped only when pi is missing and npm's registry is unreachable (failing when ``CI`` is set).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.ci import agent_installed
from helpers.pi_agent import ensure_pi

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


def test_bench_pi_quick_mode_runs(tmp_path: Path) -> None:
    agent_installed(ensure_pi, "pi")
    env = {**os.environ, "COMPACTOR_BENCH_RESULTS": str(tmp_path)}
    run = subprocess.run([sys.executable, "bench/bench_pi.py", "--quick"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    notes = json.loads((tmp_path / "pi.json").read_text(encoding="utf-8"))["notes"]
    assert {(row["pi"], row["case"]) for row in notes["table"]} == {
        ("1.6", "threshold"), ("1.6", "slow-summary"), ("1.6", "no-worker"),
        ("1.6", "no-drafts")}
    for name, pairs in notes["conversations"].items():
        for alone, with_compactor in pairs:
            assert len(alone["compactions"]) == len(with_compactor["compactions"]) == 1, name
            assert all(c["pi_cut"] for c in with_compactor["compactions"]), name
