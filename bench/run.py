"""Run every benchmark (``make bench``): each ``bench/bench_*.py`` in its own process, one after
the other, then a summary of every figure's ratio against its same-run baseline.

    .venv/bin/python bench/run.py [name ...]      # e.g. run.py throughput enqueue

Each benchmark prints its figures and writes ``bench/results/<name>.json``; a benchmark that fails
(or exceeds its time budget) is reported and makes the exit status non-zero, the others still run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BUDGET_S = float(os.environ.get("COMPACTOR_BENCH_BUDGET_S", "240"))  # per benchmark
# Benchmarks that need more: bench_scale builds and imports 30 MB sessions and starts two
# worker processes per size, variant and repetition (~10 min); bench_drafts replays four live
# sessions through three compactions each, one after the other, at a turn a second;
# bench_pi talks with pi 1.6 and 0.73 at 2 s a turn, and waits out the no-worker case;
# bench_throughput runs one and two workers and an open-loop batch at 100 ms and 2 s.
LONGER_S = {"bench_scale": 1500.0, "bench_drafts": 600.0, "bench_pi": 900.0,
            "bench_throughput": 600.0, "bench_http": 900.0}  # http: its wrk load runs


def discover(selected: list[str]) -> list[Path]:
    found = sorted(BENCH.glob("bench_*.py"))
    if not selected:
        return found
    return [p for p in found if p.stem.removeprefix("bench_") in selected or p.stem in selected]


def run_one(path: Path) -> tuple[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(BENCH), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    started = time.monotonic()
    budget = max(BUDGET_S, LONGER_S.get(path.stem, 0.0))
    try:
        code = subprocess.run([sys.executable, str(path)], cwd=REPO, env=env,
                              timeout=budget).returncode
        status = "ok" if code == 0 else f"exit {code}"
    except subprocess.TimeoutExpired:
        status = f"over its {budget:g} s budget"
    return status, time.monotonic() - started


def summary(started: float) -> list[str]:
    """One line per figure written by this run."""
    lines = []
    for path in sorted((BENCH / "results").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("started", 0) < started:
            continue  # an earlier run's, or a benchmark printing its own summary
        for fig in data.get("figures", []):
            ratio = (f"{fig['ratio']:.3f} x {fig['against']}" if fig.get("ratio") is not None
                     else "-")
            goal = f"goal {fig['goal']}" if fig.get("goal") else ""
            lines.append(f"  {data['benchmark'] + '.' + fig['name']:<52} {ratio:<36} {goal}")
    return lines


def main() -> int:
    started = time.time()
    outcomes = []
    for path in discover(sys.argv[1:]):
        print(f"\n### {path.name}", flush=True)
        status, seconds = run_one(path)
        outcomes.append((path.name, status, seconds))
    print("\n### summary (ratio against the same run's baseline)")
    print("\n".join(summary(started)))
    for name, status, seconds in outcomes:
        print(f"  {name:<28} {status:<24} {seconds:6.1f} s")
    return 0 if all(status == "ok" for _, status, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
