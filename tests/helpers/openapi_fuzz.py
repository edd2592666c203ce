"""Schemathesis over a real ``compactor serve``: a private redis-server, a real worker (threads, in
this process) whose model is a loopback OpenAI-compatible server, the server with a token on a
free loopback port, then ``schemathesis run --checks all`` against its ``/openapi.json``
(docs/http-api.md "The OpenAPI document"). ``make fuzz-api`` runs it with a long budget; the
test suite runs a short, seeded one (tests/server/test_server_openapi_fuzz.py).

``python -m helpers.openapi_fuzz --max-time 600`` (with ``tests`` on ``sys.path``) prints
Schemathesis's report and exits with its status: 0 when it found nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llm.llm_fakes import FAST, Act, FakeLLMServer, fill, openai
from runtime.runtime_support import running_worker, runtime_settings

from helpers.serve_process import TOKEN, ServeProcess
from worker.cli.demo import embedded_redis
from worker.llm import ModelCandidate

__all__ = ["FuzzRun", "fuzz", "serving"]

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
HERE = Path(__file__).resolve().parent
# The server's own limits stay on; a fuzzer's pace is not a tenant's flood, so the request rate
# is lifted (429 rate_limited is declared all the same and checked by the tests of the guards).
_SERVE_SETTINGS = {"COMPACTOR_API_RATE_PER_S": "0", "COMPACTOR_API_SSE_KEEPALIVE_S": "0.5",
                   "COMPACTOR_API_MAX_WAIT_S": "1"}
# A following event stream never ends: Schemathesis reads it until this many seconds (every other
# request answers well within it: long polls are capped at 1 s above).
REQUEST_TIMEOUT_S = 6


class _ObedientModel(FakeLLMServer):
    """A model that writes half of the output budget it is given, as a real one keeps to
    max_tokens (the default fake's fixed text is over a budget of 1 token: a 502 job_failed)."""

    def next_act(self, key: str) -> Act:
        with self.lock:
            queue = self.scripts.get(key)
            return queue.popleft() if queue else fill(0.5)


@dataclass(frozen=True, slots=True)
class FuzzRun:
    exit_code: int
    output: str  # Schemathesis's terminal report
    report: Path  # its NDJSON event stream


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    """A real ``compactor serve`` with :data:`TOKEN` in front of a private Redis and a worker;
    its URL."""
    model = _ObedientModel()
    candidate = ModelCandidate.model_validate(openai(model, "loop", api_key="sk-fuzz"))
    try:
        with embedded_redis() as redis_url, running_worker(
                runtime_settings(redis_url, models=[candidate], **FAST)):
            server = ServeProcess(redis_url, folder / "serve.log", **_SERVE_SETTINGS)
            server.start()
            try:
                yield server.url
            finally:
                server.stop()
    finally:
        model.close()


def fuzz(url: str, folder: Path, *, max_time: int, seed: int | None = None,
         max_examples: int | None = None, workers: int = 1) -> FuzzRun:
    """``schemathesis run --checks all`` against ``url``'s ``/openapi.json``."""
    report = folder / "schemathesis.ndjson"
    command = [str(SCHEMATHESIS), "--config-file", str(HERE / "schemathesis.toml"), "run",
               f"{url}/openapi.json",  # --checks all: in the file ([checks] enabled)
               "--header", f"Authorization: Bearer {TOKEN}", "--max-time", str(max_time),
               "--workers", str(workers), "--request-timeout", str(REQUEST_TIMEOUT_S), "--no-color",
               "--report", "ndjson", "--report-ndjson-path", str(report),
               "--suppress-health-check", "all"]
    # A seed makes the run repeatable (and keeps no database of past examples).
    command += (["--seed", str(seed), "--generation-deterministic"] if seed is not None
                else ["--generation-database", "none"])
    if max_examples is not None:
        command += ["--max-examples", str(max_examples)]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "helpers.openapi_fuzz_hooks",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent),
                                                       os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env,
                          timeout=max_time + 300)
    return FuzzRun(done.returncode, done.stdout + done.stderr, report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-time", type=int, default=600, help="seconds of fuzzing")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="folder for logs and reports")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="compactor-fuzz-"))
    folder.mkdir(parents=True, exist_ok=True)
    with serving(folder) as url:
        run = fuzz(url, folder, max_time=args.max_time, seed=args.seed, workers=args.workers)
    print(run.output)
    print(json.dumps({"exit_code": run.exit_code, "report": str(run.report),
                      "serve_log": str(folder / "serve.log")}))
    return run.exit_code


if __name__ == "__main__":
    sys.exit(main())
