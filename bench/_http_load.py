"""Load runs of bench_http: ``compactor serve`` (1 and 2 processes) beside its ceiling, FastAPI
serving one Redis call (bench/ceiling_app.py, 1 and 2 processes), in the same run, under
``wrk`` (apt: wrk) at several concurrencies, repeated and interleaved.

For each target, route (compact → 202, append → 200) and concurrency: requests per second,
p50/p99 latency, the answers by status (429 and 503 counted apart) and the CPU the target's
processes spent per request (utime + stime from /proc, parent and children).

The compacts go round robin over pre-imported sessions with no worker running: the first
compact of a session queues a job, the later ones coalesce into it (both 202).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _loopback import SAMPLE
from _report import Report

from api_client import CompactionClient

REPO = Path(__file__).resolve().parents[1]
LUA = Path(__file__).with_name("_http_load.lua")
PREFIX = "load-"
_TICK = os.sysconf("SC_CLK_TCK")
_RESULT = re.compile(r"^RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+)$", re.M)


@dataclass(frozen=True)
class Target:
    name: str  # serve1, serve2, ceiling1, ceiling2
    proc: subprocess.Popen[bytes]
    url: str


@dataclass(frozen=True)
class Run:
    target: str
    route: str
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    ok: int
    limited: int
    unavailable: int
    other: int
    socket_errors: int
    cpu_ms_per_request: float


def _serve(redis_url: str, token: str, port: int, tree: Path,
           options: list[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({"COMPACTOR_REDIS_URL": redis_url,
                "COMPACTOR_API_TOKENS": f'{{"{token}": "default"}}',
                # the per-tenant guards would refuse one tenant's load (429) long before the
                # server is busy: docs/security.md
                "COMPACTOR_API_RATE_PER_S": "0", "COMPACTOR_API_SSE_STREAMS_MAX": "0"})
    return subprocess.Popen([sys.executable, "-m", "worker", "serve", "--port", str(port),
                             "--log-level", "warning", *options], cwd=tree, env=env)


def start_targets(redis_url: str, token: str, free_port: Any,
                  before: Path | None = None) -> list[Target]:
    """``serve1``/``serve2`` and ``ceiling1``/``ceiling2`` (and ``before1``: ``compactor serve``
    of another tree, e.g. ``git archive <commit>``, on the same Redis)."""
    targets = []
    if before is not None:
        port = free_port()
        targets.append(Target("before1", _serve(redis_url, token, port, before, []),
                              f"http://127.0.0.1:{port}"))
    for workers in (1, 2):
        port = free_port()
        proc = _serve(redis_url, token, port, REPO, ["--workers", str(workers)])
        targets.append(Target(f"serve{workers}", proc, f"http://127.0.0.1:{port}"))
        port = free_port()
        # Its tracebacks (redis-py's pool of 100 runs out at c = 1 024) go to a file: wrk counts
        # those answers already (the row's "other"), and the bench's output stays readable.
        log = REPO / "bench" / "results" / f"ceiling{workers}.log"
        log.parent.mkdir(exist_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(REPO / "bench"), "ceiling_app:app",
             "--port", str(port), "--log-level", "warning", "--no-access-log",
             "--workers", str(workers)],
            cwd=REPO, env={**os.environ, "CEILING_REDIS_URL": redis_url},
            stderr=log.open("wb"))
        targets.append(Target(f"ceiling{workers}", proc, f"http://127.0.0.1:{port}"))
    for target in targets:
        _wait_up(target.url)
    return targets


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/openapi.json", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def stop_targets(targets: list[Target]) -> None:
    for target in targets:
        target.proc.terminate()
    for target in targets:
        target.proc.wait(20)


def import_sessions(client: CompactionClient, count: int) -> None:
    for i in range(count):
        client.sessions.import_jsonl(SAMPLE, f"{PREFIX}{i}", replace=True)


def cpu_seconds(pid: int) -> float:
    """CPU (user + system) of ``pid`` and its children so far."""
    total = 0.0
    for one in [pid, *_descendants(pid)]:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for task in tasks:
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def run_wrk(target: Target, route: str, connections: int, seconds: float, token: str,
            sessions: int) -> Run:
    threads = 1 if connections == 1 else 2
    before = cpu_seconds(target.proc.pid)
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
         "--timeout", "10s", "-s", str(LUA), target.url, "--", token, PREFIX, str(sessions),
         route], capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(target.proc.pid) - before
    found = _RESULT.search(out)
    if found is None:
        raise RuntimeError(f"wrk said: {out[-500:]}")
    ok, limited, unavailable, other, errors = (int(found.group(i)) for i in range(1, 6))
    duration_s = int(found.group(6)) / 1e6
    answered = ok + limited + unavailable + other
    return Run(target.name, route, connections, ok / duration_s, float(found.group(7)),
               float(found.group(8)), ok, limited, unavailable, other, errors,
               1000 * cpu / answered if answered else 0.0)


def load_runs(report: Report, redis_url: str, client: CompactionClient, token: str,
              free_port: Any, *, concurrencies: list[int], seconds: float, reps: int,
              sessions: int, before: Path | None = None) -> None:
    if shutil.which("wrk") is None:
        print("  (no wrk: apt-get install -y wrk; load runs skipped)", flush=True)
        return
    import_sessions(client, sessions)
    targets = start_targets(redis_url, token, free_port, before)
    runs: list[Run] = []
    try:
        for rep in range(reps):
            for route in ("compact", "append"):
                for connections in concurrencies:
                    for target in targets:  # interleaved: the machine's load hits all alike
                        run = run_wrk(target, route, connections, seconds, token, sessions)
                        runs.append(run)
                        print(f"  rep {rep} {run.target:<9} {route:<8} c={connections:<5} "
                              f"{run.rps:8.0f} rps  p50 {run.p50_ms:7.2f} ms  p99 "
                              f"{run.p99_ms:8.2f} ms  cpu {run.cpu_ms_per_request:.3f} ms/req"
                              f"  429 {run.limited} 503 {run.unavailable} other {run.other}"
                              f" socket errors {run.socket_errors}", flush=True)
    finally:
        stop_targets(targets)
    _table(report, runs, concurrencies, reps)


def _of(runs: list[Run], target: str, route: str, connections: int) -> list[Run]:
    return [r for r in runs
            if r.target == target and r.route == route and r.connections == connections]


def _median(runs: list[Run], attr: str) -> float:
    return float(statistics.median(getattr(run, attr) for run in runs))


def _table(report: Report, runs: list[Run], concurrencies: list[int], reps: int) -> None:
    """Medians over the repetitions; each serve figure against its ceiling with as many
    processes, from the same run."""
    report.note(load_runs=[run.__dict__ for run in runs], load_reps=reps)
    for route in ("compact", "append"):
        for connections in concurrencies:
            for workers in (1, 2):
                serve, ceiling = (_of(runs, f"{kind}{workers}", route, connections)
                                  for kind in ("serve", "ceiling"))
                tag = f"{route}_c{connections}_w{workers}"
                for attr, unit in (("rps", "rps"), ("cpu_ms_per_request", "ms"),
                                   ("p99_ms", "ms")):
                    report.baseline(f"ceiling_{tag}_{attr}", _median(ceiling, attr), unit,
                                    f"FastAPI + one Redis call, {workers} proc")
                    report.figure(f"serve_{tag}_{attr}", _median(serve, attr), unit,
                                  against=f"ceiling_{tag}_{attr}",
                                  what=f"compactor serve --workers {workers}, median of {reps}")
                report.note(**{f"serve_{tag}_503": sum(r.unavailable for r in serve),
                               f"serve_{tag}_429": sum(r.limited for r in serve),
                               f"serve_{tag}_other": sum(r.other for r in serve)})
            before = _of(runs, "before1", route, connections)
            if before:
                tag = f"{route}_c{connections}_w1"
                for attr, unit in (("rps", "rps"), ("cpu_ms_per_request", "ms"),
                                   ("p99_ms", "ms")):
                    report.figure(f"before_{tag}_{attr}", _median(before, attr), unit,
                                  against=f"ceiling_{tag}_{attr}",
                                  what=f"compactor serve before this change, median of {reps}")
                report.note(**{f"before_{tag}_503": sum(r.unavailable for r in before)})
