"""What every benchmark reports: figures as ratios against a baseline measured in the same run.

Absolute times cannot be compared across these noisy, shared machines; a ratio against a
baseline taken a moment earlier on the same machine (a raw Redis round trip, the model's own
latency, the ideal C/L rate, a cold plan) can. A :class:`Report` prints one line per figure and
writes ``bench/results/<name>.json`` (the folder is gitignored).

    report = Report("enqueue")
    report.baseline("rpush", p50_ms, "ms", "raw redis-py RPUSH round trip")
    report.figure("compact_p50", compact_p50_ms, "ms", against="rpush", goal="<= 3")
    report.write()
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RESULTS", "Report", "percentile"]

RESULTS = Path(os.environ.get("COMPACTOR_BENCH_RESULTS",
                              Path(__file__).resolve().parent / "results"))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Baseline:
    name: str
    value: float
    unit: str
    what: str


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    against: str | None
    ratio: float | None
    goal: str | None
    what: str
    extra: dict[str, Any] = field(default_factory=dict)


class Report:
    """The figures of one benchmark run; ``write()`` stores them as JSON."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = time.time()
        self.baselines: dict[str, Baseline] = {}
        self.figures: list[Figure] = []
        self.notes: dict[str, Any] = {}
        print(f"== {name}", flush=True)

    def baseline(self, name: str, value: float, unit: str, what: str = "") -> float:
        self.baselines[name] = Baseline(name, value, unit, what)
        print(f"  baseline {name:<28} {value:10.3f} {unit:<5} {what}", flush=True)
        return value

    def figure(self, name: str, value: float, unit: str, *, against: str | None = None,
               goal: str | None = None, what: str = "", inverse: bool = False,
               **extra: Any) -> float | None:
        """Record ``value``; with ``against`` also its ratio to that baseline (``inverse``:
        baseline / value, for rates where the baseline is the ideal). Returns the ratio."""
        ratio = None
        if against is not None:
            base = self.baselines[against].value
            ratio = (base / value if inverse else value / base) if (value and base) else None
        self.figures.append(Figure(name, value, unit, against, ratio, goal, what, extra))
        shown = f"= {ratio:6.3f} x {against}" if ratio is not None else ""
        aim = f"  (goal {goal})" if goal else ""
        print(f"  {name:<37} {value:10.3f} {unit:<5} {shown}{aim} {what}", flush=True)
        return ratio

    def note(self, **values: Any) -> None:
        self.notes.update(values)

    def write(self) -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        data = {
            "benchmark": self.name, "started": self.started,
            "seconds": round(time.time() - self.started, 3),
            "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                        "cpus": os.cpu_count()},
            "baselines": {b.name: asdict(b) for b in self.baselines.values()},
            "figures": [asdict(f) for f in self.figures],
            "notes": self.notes,
        }
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"  -> {path}", flush=True)
        return path
