"""Planning speed on the reference sessions: ``inspect plan`` in-process and as a command.

Run: .venv/bin/python bench/bench_core.py   (needs ../shared/fixtures/pi)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from api_client.session import load_session
from worker.compaction import CompactionSettings, get_tokenizer, plan_prune, prepare_compaction
from worker.tokens import TiktokenTokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "pi"


def timed(fn, runs: int = 5) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    for name in ("before-compaction", "large-session"):
        path = FIXTURES / f"{name}.jsonl"
        text = path.read_text(encoding="utf-8")
        load_ms = timed(lambda: load_session(text))  # noqa: B023
        session = load_session(text)
        entries = session.tree().path_to(session.tree().leaf_id)
        print(f"{name}: {len(entries)} entries on the path; load+migrate {load_ms:.1f} ms")
        for tok_name in ("estimate", "tiktoken"):
            cold = TiktokenTokenizer() if tok_name == "tiktoken" else get_tokenizer("estimate")
            start = time.perf_counter()
            prepare_compaction(entries, CompactionSettings(), cold)
            cold_ms = (time.perf_counter() - start) * 1000
            warm_ms = timed(lambda: prepare_compaction(entries, CompactionSettings(), cold))  # noqa: B023
            prune_ms = timed(lambda: plan_prune(entries, cold))  # noqa: B023
            cli = [sys.executable, "-m", "worker", "inspect", "plan", str(path), "--json", "--tokenizer", tok_name]
            cli_ms = timed(lambda: subprocess.run(cli, capture_output=True, check=True), runs=3)  # noqa: B023
            print(f"  {tok_name:8s} plan cold {cold_ms:7.1f} ms, re-plan (cached) {warm_ms:6.1f} ms, "
                  f"prune plan {prune_ms:6.1f} ms, CLI end to end {cli_ms:6.0f} ms")
        for command in ("plan", "prune"):
            out = subprocess.run([sys.executable, "-m", "worker", "inspect", command, str(path), "--json",
                                  "--tokenizer", "estimate"], capture_output=True, check=True, text=True).stdout
            data = json.loads(out)
            short = {k: (f"[{len(v)} ids]" if isinstance(v, list) and k.endswith("Ids") else v) for k, v in data.items()}
            print(f"  inspect {command} --tokenizer estimate: {json.dumps(short)}")


if __name__ == "__main__":
    main()
