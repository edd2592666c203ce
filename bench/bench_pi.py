"""The stall pi's user sees at a threshold compaction, pi's built-in against pi with Compactor.

    .venv/bin/python bench/bench_pi.py [--model-ms 2000] [--runs 1]

The real pi (1.6, from ``make pi``) in RPC mode talks to a loopback OpenAI-compatible model that
answers every call, turns and summaries alike, after ``--model-ms``. A conversation of equal
turns runs until pi's first threshold compaction; the stall is the time between pi's
``compaction_start`` and ``compaction_end`` events, as the RPC client reads them. Once with
pi alone (its built-in summarizes while the user waits), once with the extension
(integrations/pi) in front of ``compactor serve`` and a worker on an embedded Redis: the
extension asks for a draft in the band below the threshold, so the compaction applies it.

Figures: the built-in's stall (the baseline), the stall with Compactor and its ratio (goal
<= 5 %), and the model tokens each side spent on compaction (input + output of pi's summary
calls; of the worker's calls, drafts included). JSON to bench/results/pi.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery.contrib.testing.worker import start_worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _report import Report
from pydantic import SecretStr

from api_client import CompactionClient
from helpers.pi_agent import EXTENSION, PiInstall, ensure_pi, read_jsonl, running_pi
from helpers.pi_agent import write_agent_dir as agent_dir
from helpers.pi_model import StreamingModel
from helpers.serve_process import TOKEN, ServeProcess
from worker.app import create_app
from worker.demo import embedded_redis
from worker.hooks import HookSettings
from worker.llm import ModelCandidate
from worker.settings import WorkerSettings

# pi's threshold: 32 000 - 8 000 = 24 000 tokens; its band starts 8 192 below (about four
# turns of ~2 000 tokens). A draft stays valid while 10 000 tokens are appended after it (the
# kept tail): the extension asks again every 5 000, so one is ready when the threshold comes.
WINDOW, RESERVE, KEEP = 32_000, 8_000, 10_000
PROMPT = "Look at the importer again and tell me what the parser does. " * 66
MAX_TURNS = 40


@dataclass
class Run:
    stall_s: float
    turns: int
    summary_tokens: int
    summary_calls: list[int]  # tokens of each
    from_compactor: bool
    from_draft: bool


def jobs_done(redis_url: str, session_id: str, timeout: float = 120) -> None:
    """Wait until no job of the session is queued or running (a draft computed after the
    compaction still counts: its tokens were spent for this conversation)."""
    with CompactionClient(redis_url) as client:
        base = client.layout.session(session_id).header.removesuffix("header")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = [k for k in client.redis.keys(base + "job:*")
                       if not _text(k).endswith(":lease")]
            states = {_text(client.redis.hget(k, "state") or "") for k in records}
            if not states & {"queued", "running"}:
                return
            time.sleep(0.1)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def conversation(install: PiInstall, model: StreamingModel, work: Path, source: str,
                 env: dict[str, str] | None, redis_url: str = "") -> Run:
    """Turns until pi's first threshold compaction; its stall and what it cost."""
    home = agent_dir(work / "agent", model.base_url, context_window=WINDOW,
                     reserve_tokens=RESERVE, keep_recent_tokens=KEEP)
    spent, calls = model.tokens(source), len(model.of(source))
    extensions = (EXTENSION,) if env else ()
    with running_pi(install, home, work / "repo", extensions=extensions, env=env) as pi:
        turns = 0
        start: list[dict[str, Any]] = []
        end: list[dict[str, Any]] = []
        while not end:
            turns += 1
            if turns > MAX_TURNS:
                raise RuntimeError(f"no compaction in {MAX_TURNS} turns")
            mark = len(pi.records)
            pi.prompt(PROMPT, timeout=120)
            start, end = pi.events("compaction_start", mark), pi.events("compaction_end", mark)
        assert end[0]["reason"] == "threshold" and end[0].get("result"), end
        entry = [e for e in read_jsonl(pi.session_file()) if e.get("type") == "compaction"][-1]
        origin: dict[str, Any] = (entry.get("details") or {}).get("compactor") or {}
        session_id = pi.state()["sessionId"]
    if redis_url:  # pi has quit: nothing asks for more
        jobs_done(redis_url, session_id)
    model.wait_idle()
    return Run(end[0]["at"] - start[0]["at"], turns, model.tokens(source) - spent,
               [c.prompt_tokens + c.completion_tokens for c in model.of(source)[calls:]],
               bool(origin), bool(origin.get("fromDraft")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-ms", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1, help="conversations each way")
    args = parser.parse_args()
    install = ensure_pi()
    report = Report("pi")
    builtin: list[Run] = []
    compactor: list[Run] = []
    with embedded_redis() as url, tempfile.TemporaryDirectory() as tmp:
        model = StreamingModel(latency_s=args.model_ms / 1000, reply_chars=4000)
        settings = WorkerSettings(
            redis_url=url, pool="threads", concurrency=4, job_deadline_s=120.0,
            keep_recent_tokens=KEEP, reserve_tokens=RESERVE, context_window=WINDOW,
            hooks=HookSettings(plugins=[]),
            models=[ModelCandidate(provider="openai", model="bench", base_url=model.base_url,
                                   api_key=SecretStr("bench"), context_window=WINDOW)])
        app = create_app(settings)
        serve = ServeProcess(url, Path(tmp) / "serve.log",
                             COMPACTOR_KEEP_RECENT_TOKENS=str(KEEP),
                             COMPACTOR_RESERVE_TOKENS=str(RESERVE))
        env = {"COMPACTOR_URL": "", "COMPACTOR_TOKEN": TOKEN}
        try:
            with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                              loglevel="WARNING", shutdown_timeout=60):
                serve.start()
                env["COMPACTOR_URL"] = serve.url
                for i in range(args.runs):
                    builtin.append(conversation(install, model, Path(tmp) / f"b{i}",
                                                "pi-summary", None))
                    compactor.append(conversation(install, model, Path(tmp) / f"c{i}",
                                                  "compactor", env, url))
        finally:
            serve.stop()
            app.close_runtime()
            model.close()
    summarize(report, builtin, compactor, args.model_ms)


def summarize(report: Report, builtin: list[Run], compactor: list[Run], model_ms: int) -> None:
    assert all(not r.from_compactor for r in builtin)
    assert all(r.from_compactor for r in compactor), compactor
    median = statistics.median
    report.baseline("builtin_stall", median(r.stall_s for r in builtin) * 1000, "ms",
                    f"pi's built-in compaction, model {model_ms} ms per call")
    report.figure("compactor_stall", median(r.stall_s for r in compactor) * 1000, "ms",
                  against="builtin_stall", goal="<= 0.05",
                  what=f"pi with Compactor ({sum(r.from_draft for r in compactor)}/"
                       f"{len(compactor)} from a draft)")
    report.baseline("builtin_tokens", median(r.summary_tokens for r in builtin), "tok",
                    f"pi's summary calls ({median(len(r.summary_calls) for r in builtin):g})")
    report.figure("compactor_tokens", median(r.summary_tokens for r in compactor), "tok",
                  against="builtin_tokens",
                  what=f"the worker's calls, drafts included "
                       f"({median(len(r.summary_calls) for r in compactor):g})")
    report.note(model_ms=model_ms, window=WINDOW, reserve=RESERVE, keep_recent=KEEP,
                builtin=[vars(r) for r in builtin], compactor=[vars(r) for r in compactor])
    report.write()


if __name__ == "__main__":
    main()
