"""What the HTTP API adds: the same calls through ``compactor serve`` and through the Python
client, interleaved, as ratios to the client's own time.

    .venv/bin/python bench/bench_http.py [-n 300]

Stands up a private redis-server, ``compactor serve`` (its own process, one uvicorn worker,
bearer token on) and, for the summaries, one ``compactor worker`` (threads) with a loopback
model answering after 50 ms. Over one keep-alive HTTP/1.1 connection (the stdlib's
``http.client``: httpx alone adds its own time to each request, which is no cost of the server),
each iteration times:

* ``compact`` of a new job (a fresh imported session each time): ``POST .../compact`` → 202
  against ``CompactionClient.compact()``;
* ``append`` of two messages: ``POST .../entries`` (append, then the revision) against
  ``sessions.append_many()``;
* ``summarize``: ``POST /v1/summarize`` (a summarize job through the worker's router) against
  ``client.summarize(...).wait()``; the model's own 50 ms is the floor of both.

Then the load runs (bench/_http_load.py): ``wrk`` at c = 1 / 64 / 1 024 against
``compactor serve`` (``--workers`` 1 and 2) and, in the same run and interleaved, its ceiling:
FastAPI serving one Redis call (bench/ceiling_app.py) with as many processes; requests per
second, p50/p99, CPU per request, 429s and 503s, each as a ratio to the ceiling.

    .venv/bin/python bench/bench_http.py --load-seconds 4 --reps 2 --concurrency 1,64,1024

Writes ``bench/results/http.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _http_load import load_runs
from _loopback import SAMPLE, loopback_model, wait_for_workers, workers
from _report import Report, percentile

from api_client import CompactionClient
from worker.cli.demo import embedded_redis

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789abcdef"
PROMPT = "[User]: fix the importer in src/importer.py; keep the tests green\n" * 40


def _serve(redis_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({"COMPACTOR_REDIS_URL": redis_url,
                "COMPACTOR_API_TOKENS": f'{{"{TOKEN}": "default"}}',
                "COMPACTOR_API_RATE_PER_S": "0"})  # one tenant's load: docs/security.md
    return subprocess.Popen([sys.executable, "-m", "worker", "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=REPO, env=env)


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("compactor serve did not become ready")


class Api:
    """Requests on one keep-alive connection, with the token."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def post(self, path: str, body: Any, status: int = 200) -> Any:
        self.conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != status:
            raise RuntimeError(f"POST {path}: {response.status} {data[:200]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _pair(report: Report, name: str, via_http: list[float], via_client: list[float],
          what: str) -> None:
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        base = report.baseline(f"client_{name}_{label}", percentile(via_client, q), "ms",
                               f"the Python client's {name}, {label}")
        report.figure(f"http_{name}_{label}", percentile(via_http, q), "ms",
                      against=f"client_{name}_{label}", what=what)
        report.note(**{f"{name}_{label}_added_ms": round(percentile(via_http, q) - base, 3)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--load-seconds", type=float, default=4.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--concurrency", default="1,64,1024")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions the load uses")
    parser.add_argument("--load-only", action="store_true", help="skip the one-connection part")
    parser.add_argument("--before", type=Path, default=None,
                        help="also load compactor serve of this tree (git archive <commit>)")
    args = parser.parse_args()
    report = Report("http")
    with embedded_redis() as url:
        port = _free_port()
        server = _serve(url, port)
        base = f"http://127.0.0.1:{port}"
        client = CompactionClient(url)
        try:
            _wait_ready(base)
            client.warm()
            api = Api(port)
            try:
                if not args.load_only:
                    _enqueue(report, api, client, args.n)
                    with loopback_model(0.05) as model, workers(url, model.base_url):
                        wait_for_workers(url, 1)
                        _summaries(report, api, client, max(20, args.n // 10))
            finally:
                api.close()
            load_runs(report, url, client, TOKEN, _free_port,
                      concurrencies=[int(c) for c in args.concurrency.split(",")],
                      seconds=args.load_seconds, reps=args.reps, sessions=args.sessions,
                      before=args.before)
        finally:
            client.close()
            server.terminate()
            server.wait(15)
    report.write()


def _enqueue(report: Report, api: Api, client: CompactionClient, n: int) -> None:
    sids = [client.sessions.import_jsonl(SAMPLE, f"bench-{i}") for i in range(2 * n + 20)]
    http_compact, client_compact, http_append, client_append = [], [], [], []
    messages = [{"role": "user", "content": "next step", "timestamp": 1},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}],
                 "timestamp": 2}]
    for i in range(n + 10):  # the first 10 of each warm up
        a, b = sids[2 * i], sids[2 * i + 1]
        t_http = _timed(lambda a=a: api.post(f"/v1/sessions/{a}/compact", {"reason": "manual"},
                                             202))
        t_client = _timed(lambda b=b: client.compact(b, reason="manual"))
        t_http_append = _timed(lambda a=a: api.post(f"/v1/sessions/{a}/entries",
                                                    {"entries": messages}))
        t_client_append = _timed(lambda b=b: client.sessions.append_many(b, messages))
        if i >= 10:
            http_compact.append(t_http)
            client_compact.append(t_client)
            http_append.append(t_http_append)
            client_append.append(t_client_append)
    _pair(report, "compact", http_compact, client_compact,
          "POST /v1/sessions/{id}/compact -> 202 (one uvicorn process)")
    _pair(report, "append", http_append, client_append,
          "POST /v1/sessions/{id}/entries, 2 messages (one round trip)")


def _summaries(report: Report, api: Api, client: CompactionClient, n: int) -> None:
    via_http, via_client = [], []
    body = {"systemPrompt": "You summarize.", "prompt": PROMPT}
    for i in range(n + 3):
        t_http = _timed(lambda: api.post("/v1/summarize", body))
        t_client = _timed(lambda: client.summarize("You summarize.", PROMPT).wait(timeout=60))
        if i >= 3:
            via_http.append(t_http)
            via_client.append(t_client)
    report.baseline("model_call", 50.0, "ms", "the loopback model's own latency")
    report.figure("http_summarize_p50_vs_model", percentile(via_http, 0.5), "ms",
                  against="model_call", what="POST /v1/summarize, end to end through a worker")
    _pair(report, "summarize", via_http, via_client,
          "POST /v1/summarize against client.summarize().wait(), same worker and model")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
