"""Planning speed on the reference sessions, as ratios to the cold plan of the same session.

Run: .venv/bin/python bench/bench_core.py   (needs ../shared/fixtures/pi; skipped without it)

Baseline per session and tokenizer: ``prepare_compaction`` on a fresh tokenizer (cold). Figures:
re-plan with the same tokenizer (its caches warm), the prune plan, ``inspect plan`` as a command
(process start included), and loading the JSONL.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _report import Report

from api_client.contract.session import load_session
from worker.compaction import CompactionSettings, get_tokenizer, plan_prune, prepare_compaction
from worker.tokens import TiktokenTokenizer


def _fixtures() -> Path:
    """``COMPACTOR_PI_FIXTURES``, else the nearest ``shared/fixtures/pi`` above the checkout."""
    if "COMPACTOR_PI_FIXTURES" in os.environ:
        return Path(os.environ["COMPACTOR_PI_FIXTURES"])
    for parent in Path(__file__).resolve().parents[1:]:
        if (parent / "shared" / "fixtures" / "pi").is_dir():
            return parent / "shared" / "fixtures" / "pi"
    return Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "pi"


FIXTURES = _fixtures()


def timed(fn, runs: int = 5) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def bench_tokenizer(report: Report, name: str, path: Path, entries: list, tok_name: str,  # type: ignore[type-arg]
                    load_ms: float) -> None:
    cold = TiktokenTokenizer() if tok_name == "tiktoken" else get_tokenizer("estimate")
    start = time.perf_counter()
    prepare_compaction(entries, CompactionSettings(), cold)
    base = report.baseline(f"{name} {tok_name} cold plan",
                           (time.perf_counter() - start) * 1000, "ms")
    warm_ms = timed(lambda: prepare_compaction(entries, CompactionSettings(), cold))
    prune_ms = timed(lambda: plan_prune(entries, cold))
    cli = [sys.executable, "-m", "worker", "inspect", "plan", str(path), "--json", "--tokenizer",
           tok_name]
    cli_ms = timed(lambda: subprocess.run(cli, capture_output=True, check=True), runs=3)
    against = f"{name} {tok_name} cold plan"
    report.figure(f"{name} {tok_name} re-plan (warm)", warm_ms, "ms", against=against)
    report.figure(f"{name} {tok_name} prune plan", prune_ms, "ms", against=against)
    report.figure(f"{name} {tok_name} CLI end to end", cli_ms, "ms", against=against)
    report.figure(f"{name} {tok_name} load+migrate", load_ms, "ms", against=against)
    assert base > 0


def main() -> None:
    if not FIXTURES.is_dir():
        print(f"bench_core: skipped, no reference sessions at {FIXTURES}")
        return
    report = Report("core")
    for name in ("before-compaction", "large-session"):
        path = FIXTURES / f"{name}.jsonl"
        text = path.read_text(encoding="utf-8")
        load_ms = timed(lambda: load_session(text))  # noqa: B023
        session = load_session(text)
        entries = session.tree().path_to(session.tree().leaf_id)
        print(f"{name}: {len(entries)} entries on the path")
        for tok_name in ("estimate", "tiktoken"):
            bench_tokenizer(report, name, path, entries, tok_name, load_ms)
        for command in ("plan", "prune"):
            out = subprocess.run([sys.executable, "-m", "worker", "inspect", command, str(path),
                                  "--json", "--tokenizer", "estimate"],
                                 capture_output=True, check=True, text=True).stdout
            data = json.loads(out)
            short = {k: (f"[{len(v)} ids]" if isinstance(v, list) and k.endswith("Ids") else v)
                     for k, v in data.items()}
            print(f"  inspect {command} --tokenizer estimate: {json.dumps(short)}")
    report.write()


if __name__ == "__main__":
    main()
