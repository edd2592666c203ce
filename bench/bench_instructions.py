"""The worker's plan in instructions, not milliseconds: the re-plan and warm ratios, free of noise.

    .venv/bin/python bench/bench_instructions.py [--growths 3]

``bench_overhead`` times the plan; on this shared machine its ratios move by one or two points
from run to run, and a change of 2-3 % cannot be seen in them. Here the same job
(``bench_overhead._job``: snapshot decoding, prune, plan, requests, ledger, the count after the
commit) runs under valgrind's cachegrind, which counts the instructions the process executes:
the same count on every run (``PYTHONHASHSEED=0``; within 0.001 % here), the same ratios on any
x86-64 machine with the same wheels.

One process per step, each a prefix of the next, the difference being the step:
``setup`` (load the texts, the cl100k counter, the modules), ``cold`` (+ the first plan),
``warm`` (+ the same session again), ``grown`` (+ ``--growths`` sessions grown by 10 % of
their context, as ``bench_overhead`` grows them), and ``cold grown`` (setup + the first grown
session planned cold). Figures: warm / cold, grown / cold, grown / cold grown.

Instructions are not time: the re-plan touches more memory per instruction than the cold plan
(cached objects all over the heap; a cold plan is mostly BPE), so its share of the cold plan's
time is 1.1-1.2x its share of the instructions (``bench_overhead`` measures the time).
Skipped when valgrind is not installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _report import Report

REPO = Path(__file__).resolve().parents[1]
SESSIONS = ("large-session", "before-compaction")
STEPS = ("setup", "cold", "warm", "grown", "cold-grown")
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def child(name: str, folder: Path, step: str, growths: int) -> None:
    """One step's process (see the module's doc): the jobs up to ``step``, nothing printed."""
    import bench_overhead as overhead

    from worker.store.entry_cache import EntryCache
    from worker.tokens import cl100k_counter

    session, grown = overhead._held(name, folder)
    worker = overhead.Worker("tiktoken")
    cl100k_counter()
    overhead._import_job_modules()
    entries = EntryCache()
    if step == "cold-grown":
        overhead._job(grown[0], worker, entries, [])
        return
    jobs = {"setup": [], "cold": [session], "warm": [session, session],
            "grown": [session, session, *grown[:growths]]}[step]
    for number, replies in enumerate(jobs):  # the first job stores counts, as a worker's does
        overhead._job(replies, worker, entries, [] if number == 0 else None)


def _instructions(name: str, folder: Path, step: str, growths: int) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, __file__, "--child", name, str(folder), step, str(growths)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{name} {step}: valgrind failed\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def measure(name: str, folder: Path, growths: int) -> dict[str, float]:
    # Once without valgrind: the bytecode is compiled before any step is counted.
    subprocess.run([sys.executable, __file__, "--child", name, str(folder), "setup", "0"],
                   check=True, cwd=REPO)
    count = {step: _instructions(name, folder, step, growths) for step in STEPS}
    return {"cold": count["cold"] - count["setup"], "warm": count["warm"] - count["cold"],
            "grown": (count["grown"] - count["warm"]) / growths,
            "cold_grown": count["cold-grown"] - count["setup"]}


def report_session(report: Report, name: str, counts: dict[str, float]) -> None:
    mega = {k: v / 1e6 for k, v in counts.items()}
    report.baseline(f"{name}.cold", mega["cold"], "M", "instructions of the first plan")
    report.baseline(f"{name}.cold_grown", mega["cold_grown"], "M",
                    "instructions of the grown session's first plan")
    report.figure(f"{name}.warm", mega["warm"], "M", against=f"{name}.cold",
                  what="the same session planned again")
    report.figure(f"{name}.grow10", mega["grown"], "M", against=f"{name}.cold", goal="<= 0.15",
                  what="a session grown by 10 % of its context, planned again")
    report.figure(f"{name}.grow10_of_grown", mega["grown"], "M", against=f"{name}.cold_grown",
                  what="the same, against the grown session's first plan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--growths", type=int, default=3)
    parser.add_argument("--child", nargs=4, metavar=("SESSION", "TEXTS", "STEP", "GROWTHS"))
    args = parser.parse_args()
    if args.child:
        name, folder, step, growths = args.child
        child(name, Path(folder), step, int(growths))
        return
    report = Report("instructions")
    if shutil.which("valgrind") is None:
        print("  valgrind is not installed: skipped (apt-get install valgrind)")
        report.note(skipped="valgrind not installed")
        report.write()
        return
    import bench_overhead as overhead

    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as folder:
        for name in SESSIONS:
            if not (overhead.FIXTURES / f"{name}.jsonl").exists():
                print(f"  {name}: fixture missing, skipped")
                continue
            overhead.write_texts(name, Path(folder))
            counts: dict[str, Any] = measure(name, Path(folder), args.growths)
            report.note(**{name: counts})
            report_session(report, name, counts)
    report.write()


if __name__ == "__main__":
    main()
