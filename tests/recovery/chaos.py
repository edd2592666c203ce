"""Chaos run: workers killed, Redis restarted (AOF), one worker cut off from Redis, while an agent
keeps appending and asking for compactions. Afterwards every job ended exactly once (one
completion event, at most one entry), no acknowledged append is lost and no job is stuck.

``make chaos`` runs it for a few minutes; tests/recovery/test_recovery_chaos.py runs a short
version. ``python -m recovery.chaos --duration 180`` (with ``PYTHONPATH=tests``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from recovery.recovery_support import REPO, RedisServer, WorkerProcess, wait_until, worker_env

from api_client import ClientSettings, CompactionClient
from api_client.contract.errors import CompactorError
from api_client.contract.job_events import decode_event

DEMO = REPO / "worker" / "data" / "demo-session.jsonl"


class SlowModel:
    """An OpenAI-compatible loopback model on ``host`` that takes ``delay_s`` per answer."""

    def __init__(self, host: str, delay_s: float) -> None:
        self.requests = 0
        lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    model.requests += 1
                time.sleep(delay_s)
                body = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "## Goal\nchaos summary"}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 5}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, host: str) -> str:
        return f"http://{host}:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class NetNamespace:
    """A network namespace joined to the host by a veth pair (``cut``/``heal`` the host end)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name, self.host_if, self.ns_if = f"cmp-{tag}", f"vh{tag}", f"vn{tag}"
        octet = random.randint(2, 250)
        self.host_ip, self.ns_ip = f"10.231.{octet}.1", f"10.231.{octet}.2"

    def create(self) -> None:
        ns = ["ip", "netns", "exec", self.name]
        for cmd in (["ip", "netns", "add", self.name],
                    ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if],
                    ["ip", "link", "set", self.ns_if, "netns", self.name],
                    ["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if],
                    ["ip", "link", "set", self.host_if, "up"],
                    [*ns, "ip", "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_if],
                    [*ns, "ip", "link", "set", self.ns_if, "up"],
                    [*ns, "ip", "link", "set", "lo", "up"]):
            subprocess.run(cmd, check=True, capture_output=True, timeout=20)

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "down"], check=True, timeout=20)

    def heal(self) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "up"], check=True, timeout=20)

    def delete(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)


def netns_available() -> str | None:
    """None if a namespace can be made here, else the reason it cannot."""
    if shutil.which("ip") is None:
        return "the ip command is missing"
    probe = NetNamespace()
    try:
        probe.create()
    except (subprocess.CalledProcessError, OSError) as err:
        return f"cannot create a network namespace: {err}"
    finally:
        probe.delete()
    return None


@dataclass
class Tally:
    jobs: list[str] = field(default_factory=list)
    appended: dict[str, list[str]] = field(default_factory=dict)
    chaos: Counter[str] = field(default_factory=Counter)
    refused: int = 0  # client calls refused while Redis was down (retried)


class Agent(threading.Thread):
    """Appends messages and asks for threshold compactions on ``sessions`` until stopped."""

    def __init__(self, client: CompactionClient, sessions: list[str], tally: Tally,
                 target_jobs: int, spread_s: float) -> None:
        super().__init__(name="chaos-agent", daemon=True)
        self.client, self.sessions, self.tally = client, sessions, tally
        self.target_jobs = target_jobs
        self.spread_s = spread_s  # jobs are asked for evenly over this long
        self.stop = threading.Event()

    def _jobs_due(self, started: float) -> int:
        share = min(1.0, (time.monotonic() - started) / self.spread_s)
        return max(1, int(self.target_jobs * share))

    def run(self) -> None:
        filler = "details " * 120
        n = 0
        started = time.monotonic()
        while not self.stop.is_set():
            sid = random.choice(self.sessions)
            n += 1
            try:
                for role in ("user", "assistant"):
                    message = {"role": role, "content": f"{role} {n}: {filler}", "timestamp": n}
                    if role == "assistant":
                        message = {"role": "assistant", "content": [{"type": "text",
                                   "text": message["content"]}], "provider": "p", "model": "m",
                                   "stopReason": "stop", "timestamp": n}
                    self.tally.appended[sid].append(self.client.sessions.append(sid, message))
                if len(self.tally.jobs) < self._jobs_due(started):
                    handle = self.client.compact(sid, reason="threshold")
                    if not handle.coalesced:
                        self.tally.jobs.append(handle.id)
            except CompactorError:
                self.tally.refused += 1
                time.sleep(0.2)
            time.sleep(0.02)


NO_LOOP_GUARD = 1_000_000


@dataclass
class ChaosConfig:
    duration_s: float = 30.0
    sessions: int = 50
    jobs: int = 200
    workers: int = 2
    model_delay_s: float = 0.05
    lease_ttl_s: float = 4.0
    netns: bool = True


class Chaos:
    def __init__(self, config: ChaosConfig, folder: Path) -> None:
        self.config = config
        self.folder = folder
        self.ns = NetNamespace() if config.netns else None
        bind = "127.0.0.1"
        if self.ns is not None:
            self.ns.create()
            bind = f"127.0.0.1 {self.ns.host_ip}"
        self.redis = RedisServer(folder / "redis", aof=True, bind=bind,
                                 extra=["--protected-mode", "no"]).start()
        self.model = SlowModel("0.0.0.0", config.model_delay_s)
        self.workers: list[WorkerProcess] = []
        self.cut_worker: WorkerProcess | None = None
        self.tally = Tally()
        self._spawned = 0

    def env(self, host: str) -> dict[str, str]:
        # The cut-off worker reaches the model over the namespace's veth (10.231.x.1): plain
        # http beyond loopback, allowed explicitly.
        models = json.dumps([{"provider": "openai", "model": "loop", "base_url":
                              self.model.url(host), "api_key": "k", "allow_http": True}])
        c = self.config
        return worker_env(f"redis://{host}:{self.redis.port}/0", COMPACTOR_MODELS=models,
                          COMPACTOR_CONCURRENCY="4", COMPACTOR_LEASE_TTL_S=str(c.lease_ttl_s),
                          COMPACTOR_KEEP_RECENT_TOKENS="300", COMPACTOR_JOB_DEADLINE_S="60",
                          COMPACTOR_VISIBILITY_TIMEOUT_S="90", COMPACTOR_TOKENIZER="estimate",
                          COMPACTOR_SWEEP_INTERVAL_S="1", COMPACTOR_REQUEUE_AFTER_S="20",
                          # The agent compacts each session ~4 times in seconds: the loop guard
                          # would (rightly) refuse those, and chaos is not testing it.
                          COMPACTOR_LOOP_GUARD_MAX=str(NO_LOOP_GUARD))

    def spawn(self) -> WorkerProcess:
        self._spawned += 1
        worker = WorkerProcess(self.env("127.0.0.1"), f"w{self._spawned}", self.folder)
        self.workers.append(worker)
        return worker

    def run(self) -> dict[str, Any]:
        c = self.config
        client = CompactionClient(ClientSettings(redis_url=self.redis.url,
                                                 loop_guard_max=NO_LOOP_GUARD))
        text = DEMO.read_text(encoding="utf-8")
        sessions = [client.sessions.import_jsonl(text, f"chaos-{i}") for i in range(c.sessions)]
        self.tally.appended = {sid: [] for sid in sessions}
        for _ in range(c.workers):
            self.spawn()
        if self.ns is not None:
            self.cut_worker = WorkerProcess(self.env(self.ns.host_ip), "cutoff", self.folder,
                                            prefix=self.ns.prefix)
        for w in [*self.workers, *([self.cut_worker] if self.cut_worker else [])]:
            w.wait_ready(90)
        agent = Agent(client, sessions, self.tally, c.jobs, c.duration_s * 0.8)
        agent.start()
        started = time.monotonic()
        try:
            self._drive(started)
            # On a loaded machine the agent asks for fewer jobs in the time (appends are slower,
            # and a session with a job in flight coalesces): it goes on, quietly, up to the target.
            deadline = time.monotonic() + 90
            while (len(self.tally.jobs) < c.jobs and time.monotonic() < deadline
                   and agent.is_alive()):
                time.sleep(0.2)
        finally:
            agent.stop.set()
            agent.join(30)
        for w in [*self.workers, *([self.cut_worker] if self.cut_worker else [])]:
            if not w.alive():
                self.spawn().wait_ready(90)
        report = self._settle(client, sessions)
        report["seconds"] = round(time.monotonic() - started, 1)
        client.close()
        return report

    def _drive(self, started: float) -> None:
        """Kill a worker, restart Redis, cut the namespaced worker off, repeated until the end."""
        c = self.config
        period = max(10.0, c.duration_s / max(1, round(c.duration_s / 30)))
        while time.monotonic() - started < c.duration_s:
            round_start = time.monotonic()
            time.sleep(period * 0.15)
            victim = random.choice([w for w in self.workers if w.alive()])
            victim.kill()
            self.tally.chaos["worker SIGKILLs"] += 1
            self.spawn()
            time.sleep(period * 0.15)
            self.redis.restart(down_s=2.0)
            self.tally.chaos["Redis restarts (AOF)"] += 1
            time.sleep(period * 0.1)
            if self.ns is not None:
                self.ns.cut()
                time.sleep(c.lease_ttl_s * 2)  # longer than its leases: its jobs are taken over
                self.ns.heal()
                self.tally.chaos["network cuts"] += 1
            remaining = period - (time.monotonic() - round_start)
            if remaining > 0:
                time.sleep(remaining)

    def _settle(self, client: CompactionClient, sessions: list[str]) -> dict[str, Any]:
        """Wait for every job to end, then check the invariants; the counts."""
        jobs = list(dict.fromkeys(self.tally.jobs))

        def open_jobs() -> list[str]:
            return [j for j in jobs if not client.jobs.get(j).state.terminal]

        with contextlib.suppress(AssertionError):  # what is left open is reported as stuck
            wait_until(lambda: not open_jobs(), 180, "every job to end", 1.0)
        stuck = open_jobs()
        states: Counter[str] = Counter()
        problems: list[str] = []
        by_session: dict[str, list[Any]] = {sid: [] for sid in sessions}
        for job in jobs:
            record = client.jobs.get(job)
            states[record.state.value] += 1
            by_session[record.session_id].append(record)
        for sid in sessions:
            problems += self._check_session(client, sid, by_session[sid])
        takeovers = sum(w.log().count("sent again") for w in self._all_workers())
        return {"jobs": len(jobs), "states": dict(states), "stuck": len(stuck),
                "appends": sum(len(v) for v in self.tally.appended.values()),
                "refused calls during outages": self.tally.refused,
                "sweep re-sends": takeovers, "chaos": dict(self.tally.chaos),
                "model calls": self.model.requests, "problems": problems}

    def _check_session(self, client: CompactionClient, sid: str, records: list[Any]) -> list[str]:
        problems = []
        stream = client.layout.session(sid).events
        ends = Counter(e.job_id
                       for e in (decode_event(i, f) for i, f in client.redis.xrange(stream))
                       if e.terminal)
        for record in records:
            if record.state.terminal and ends[record.id] != 1:
                problems.append(f"job {record.id}: {ends[record.id]} completion events")
        lines = [json.loads(x) for x in client.sessions.export_jsonl(sid).splitlines()[1:]]
        ids = {e["id"] for e in lines}
        compactions = [e["id"] for e in lines if e.get("type") == "compaction"]
        written = [r.result_entry_id for r in records if r.result_entry_id]
        if len(set(written)) != len(written) or set(compactions) != set(written):
            problems.append(f"session {sid}: compaction entries {len(compactions)} != jobs' "
                            f"entries {len(written)}")
        lost = [a for a in self.tally.appended[sid] if a not in ids]
        if lost:
            problems.append(f"session {sid}: {len(lost)} appends lost")
        return problems

    def _all_workers(self) -> list[WorkerProcess]:
        return [*self.workers, *([self.cut_worker] if self.cut_worker else [])]

    def close(self) -> None:
        for w in self._all_workers():
            w.stop(20)
        self.redis.stop()
        self.model.close()
        if self.ns is not None:
            self.ns.delete()


def run(config: ChaosConfig, folder: Path | None = None) -> dict[str, Any]:
    folder = folder or Path(tempfile.mkdtemp(prefix="compactor-chaos-"))
    chaos = Chaos(config, folder)
    try:
        return chaos.run()
    finally:
        chaos.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    args = parser.parse_args(argv)
    reason = netns_available()
    if reason:
        print(f"network cut skipped: {reason}")
    config = ChaosConfig(duration_s=args.duration, jobs=args.jobs, sessions=args.sessions,
                         lease_ttl_s=args.lease_ttl, netns=reason is None)
    report = run(config)
    print(json.dumps(report, indent=2))
    return 1 if report["problems"] or report["stuck"] else 0


if __name__ == "__main__":
    sys.exit(main())
