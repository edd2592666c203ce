"""The stall pi's user sees at a compaction: pi alone against pi with Compactor, in one run.

    .venv/bin/python bench/bench_pi.py [--pi 1.6,0.73] [--runs 1] [--compactions 2] [--quick]

The real pi from npm (1.6, and 0.73.1 when ``make pi`` installed it beside) runs in RPC mode
with non-default compaction settings (window 32 000, reserveTokens 4 000, keepRecentTokens
3 000) against a loopback OpenAI-compatible model, which tells a summary request (pi's
summarization system prompt, or any call of a worker) from a conversation turn and delays each
by its own latency. Compactor is ``compactor serve`` and one ``compactor worker`` with nothing
set beyond the Redis URL and the model (no tuned setting). The cases, each a conversation of pi
alone (no extension) and one of pi with the extension (integrations/pi), side by side:

- ``threshold``: turns and summaries 2 s, threshold compactions;
- ``slow-summary``: turns 2 s, summaries 10 s;
- ``no-worker``: ``compactor serve`` up on a Redis no worker reads (the extension's own
  timeout, ``COMPACTOR_PI_TIMEOUT_S``, unless ``--no-worker-timeout-s`` sets it);
- ``no-drafts``: as ``threshold`` with the extension's drafts off (``COMPACTOR_PI_PRECOMPUTE``
  0): every compaction planned at pi's threshold, where the cut must be pi's.

The last two run beside the first two, each on a Redis, serve and worker of its own.

The stall of a compaction is the time between pi's ``compaction_start`` and ``compaction_end``
RPC events. A probe extension (bench/pi_cut_probe.ts, loaded before Compactor's) records pi's
own preparation of each compaction: the cut matches when the entry's ``firstKeptEntryId`` is
the preparation's. ``--quick`` is the smoke test's mode (short latencies, one compaction, a 5 s
no-worker timeout, pi 1.6). JSON to bench/results/pi.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _loopback import wait_for_workers
from _pi_report import KEEP, RESERVE, WINDOW, Case, Conversation, Results, compactions, summarize
from _report import Report

from api_client import CompactionClient
from helpers.pi_agent import EXTENSION, PiInstall, PiRpc, ensure_pi, find_pi_073, read_jsonl
from helpers.pi_agent import write_agent_dir as agent_dir
from helpers.pi_model import Call, StreamingModel
from helpers.serve_process import TOKEN, ServeProcess
from worker.cli.demo import embedded_redis

REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "pi_cut_probe.ts"
# ~1 000 tokens asked, ~1 000 answered: pi's threshold (28 000) comes after about 14 turns.
PROMPT = "Look at the importer again and tell me what the parser does. " * 66
MAX_TURNS = 60
TURN_TIMEOUT_S = 400.0
BESIDE = ("no-worker", "no-drafts")  # cases run beside the others, on stacks of their own


@dataclass(frozen=True)
class PiVersion:
    label: str
    install: PiInstall  # .settles: pi 1.6 says agent_settled after a prompt; 0.73 does not


class PacedModel(StreamingModel):
    """The loopback model, answering a turn after ``turn_s`` and a summary (pi's own or a
    worker's call) after ``summary_s``; both may change between cases."""

    def __init__(self, turn_s: float, summary_s: float) -> None:
        super().__init__(latency_s=0.0, reply_chars=4000)
        self.turn_s, self.summary_s = turn_s, summary_s

    def _respond(self, handler: BaseHTTPRequestHandler, call: Call) -> None:
        time.sleep(self.turn_s if call.source == "pi" else self.summary_s)
        super()._respond(handler, call)


def versions(wanted: list[str]) -> list[PiVersion]:
    found = []
    for label in wanted:
        if label == "1.6":
            found.append(PiVersion("1.6", ensure_pi()))
        elif label == "0.73":
            ensure_pi()
            old = find_pi_073()
            if old is None:
                print("pi 0.73.1 is not installed (make pi): skipped", flush=True)
                continue
            found.append(PiVersion("0.73", old))
        else:
            raise SystemExit(f"--pi: unknown version {label} (1.6, 0.73)")
    return found


def prompt_turn(pi: PiRpc, version: PiVersion) -> None:
    """One turn, returning once pi is idle again (its compaction, if any, done)."""
    if version.install.settles:
        pi.prompt(PROMPT, timeout=TURN_TIMEOUT_S)
        return
    mark = len(pi.records)
    response = pi.command({"type": "prompt", "message": PROMPT}, TURN_TIMEOUT_S)
    assert response["success"], response
    end = pi.wait_for(lambda r: r.get("type") == "agent_end", mark, TURN_TIMEOUT_S)
    # pi 0.73 checks the threshold after agent_end: the last answer's usage over window - reserve
    usage = [m for m in end["messages"] if m.get("role") == "assistant"][-1].get("usage") or {}
    tokens = usage.get("totalTokens") or usage.get("input", 0) + usage.get("output", 0)
    if tokens > WINDOW - RESERVE:
        pi.wait_for(lambda r: r.get("type") == "compaction_end", mark, TURN_TIMEOUT_S)


def converse(version: PiVersion, model: PacedModel, work: Path, want: int,
             env: dict[str, str] | None) -> tuple[Conversation, str]:
    """Turns until ``want`` compactions; each one's stall and cut. Returns pi's session id."""
    home = agent_dir(work / "agent", model.base_url, context_window=WINDOW,
                     reserve_tokens=RESERVE, keep_recent_tokens=KEEP)
    probe_file = work / "probe.jsonl"
    extensions = (PROBE, EXTENSION) if env is not None else ()
    full_env = {**(env or {}), "BENCH_PI_PROBE": str(probe_file)}
    conversation = Conversation("compactor" if env is not None else "alone", 0)
    pi = PiRpc(version.install, home, work / "repo", extensions=extensions, env=full_env)
    try:
        while len(pi.events("compaction_end")) < want:
            conversation.turns += 1
            if conversation.turns > MAX_TURNS:
                raise RuntimeError(f"{conversation.side}: {want} compactions not in {MAX_TURNS} "
                                   f"turns; log:\n{pi.log()[-2000:]}")
            prompt_turn(pi, version)
        starts, ends = pi.events("compaction_start"), pi.events("compaction_end")
        session = read_jsonl(pi.session_file())
        session_id = str(pi.state()["sessionId"])
    finally:
        pi.close()
    probes = read_jsonl(probe_file) if probe_file.exists() else []
    conversation.compactions = compactions(starts, ends, session, probes)
    return conversation, session_id


def jobs_done(redis_url: str, session_id: str, timeout: float = 120) -> None:
    """Wait until no job of the session is queued or running (a draft computed after the
    compaction still counts: its tokens were spent for this conversation)."""
    with CompactionClient(redis_url) as client:
        base = client.layout.session(session_id).header.removesuffix("header")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = [k for k in client.redis.keys(base + "job:*")
                       if not _text(k).endswith(":lease")]
            if not {_text(client.redis.hget(k, "state") or "") for k in records} & {
                    "queued", "running"}:
                return
            time.sleep(0.1)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class Stack:
    """Compactor for one case: its Redis, serve, the extension's environment and the model the
    worker (if any) calls (pi with the extension talks to the same one)."""

    redis_url: str
    model: PacedModel
    env: dict[str, str]


def run_case(version: PiVersion, case: Case, stack: Stack, work: Path
             ) -> tuple[Conversation, Conversation]:
    """pi alone and pi with Compactor, side by side, each with its own model server."""
    stack.model.turn_s, stack.model.summary_s = case.turn_s, case.summary_s
    alone_model = PacedModel(case.turn_s, case.summary_s)
    spent = stack.model.tokens("compactor")
    try:
        with ThreadPoolExecutor(2) as pool:
            alone = pool.submit(converse, version, alone_model, work / "alone",
                                case.compactions, None)
            with_compactor = pool.submit(converse, version, stack.model, work / "compactor",
                                         case.compactions,
                                         stack.env | dict(case.extension_env))
            (built_in, _), (compactor, session_id) = alone.result(), with_compactor.result()
        if case.worker:  # pi has quit: nothing asks for more; a late draft still counts
            jobs_done(stack.redis_url, session_id)
        stack.model.wait_idle()
        compactor.summary_tokens = stack.model.tokens("compactor") - spent
        alone_model.wait_idle()
        built_in.summary_tokens = alone_model.tokens("pi-summary")
    finally:
        alone_model.close()
    print(f"  {version.label} {case.name}: alone "
          f"{[round(c.stall_ms) for c in built_in.compactions]} ms, compactor "
          f"{[round(c.stall_ms) for c in compactor.compactions]} ms", flush=True)
    return built_in, compactor


def run_cases(version: PiVersion, cases: list[Case], stacks: dict[str, Stack], work: Path
              ) -> list[tuple[Conversation, Conversation]]:
    return [run_case(version, case, stacks[case.name], work / case.name) for case in cases]


@contextmanager
def default_worker(redis_url: str, model_url: str, log: Path) -> Iterator[None]:
    """``compactor worker`` with nothing set but the Redis URL and the model it calls."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({"COMPACTOR_REDIS_URL": redis_url, "COMPACTOR_MODELS": json.dumps(
        [{"provider": "openai", "model": "loop", "base_url": model_url, "api_key": "loop"}])})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "worker", "worker"], cwd=REPO, env=env,
                                stdout=out, stderr=out)
    try:
        wait_for_workers(redis_url, 1, timeout_s=120)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def compactor_stack(stack: ExitStack, tmp: Path, name: str, worker: bool,
                    pi_timeout_s: float | None) -> Stack:
    """Redis, serve and (if ``worker``) a worker, stopped when ``stack`` closes."""
    url = stack.enter_context(embedded_redis())
    model = PacedModel(0.0, 0.0)
    stack.callback(model.close)
    if worker:
        stack.enter_context(default_worker(url, model.base_url, tmp / f"{name}-worker.log"))
    serve = ServeProcess(url, tmp / f"{name}-serve.log")
    serve.start()
    stack.callback(serve.stop)
    env = {"COMPACTOR_URL": serve.url, "COMPACTOR_TOKEN": TOKEN}
    if pi_timeout_s is not None:
        env["COMPACTOR_PI_TIMEOUT_S"] = f"{pi_timeout_s:g}"
    return Stack(url, model, env)




def main() -> None:
    args = parse()
    quick = args.quick
    turn = 0.2 if quick else 2.0
    want = 1 if quick else args.compactions
    cases = [Case("threshold", turn, turn, True, want),
             Case("slow-summary", turn, 1.0 if quick else 10.0, True, want),
             Case("no-worker", turn, turn, False, 1),
             Case("no-drafts", turn, turn, True, want, (("COMPACTOR_PI_PRECOMPUTE", "0"),))]
    if args.cases:
        cases = [c for c in cases if c.name in args.cases.split(",")]
    pi_versions = versions((args.pi or ("1.6" if quick else "1.6,0.73")).split(","))
    timeout = 5.0 if quick and args.no_worker_timeout_s is None else args.no_worker_timeout_s
    report = Report("pi")
    results: Results = {}
    with ExitStack() as stack:
        tmp = (Path(args.logs) if args.logs
               else Path(stack.enter_context(tempfile.TemporaryDirectory())))
        tmp.mkdir(parents=True, exist_ok=True)
        # threshold and slow-summary share one worker, one after the other; no-worker and
        # no-drafts run beside them, one after the other, each on a stack of its own
        stacks = {c.name: compactor_stack(stack, tmp, c.name, c.worker,
                                          None if c.worker else timeout)
                  for c in cases if c.name in BESIDE}
        if any(c.name not in BESIDE for c in cases):
            shared = compactor_stack(stack, tmp, "worker", True, None)
            stacks |= {c.name: shared for c in cases if c.name not in BESIDE}
        for version in pi_versions:
            for run in range(args.runs):
                work = tmp / f"{version.label}-{run}"
                with ThreadPoolExecutor(1) as side:
                    beside = [c for c in cases if c.name in BESIDE]
                    others = side.submit(run_cases, version, beside, stacks, work)
                    for case in cases:
                        if case.name not in BESIDE:
                            results.setdefault((version.label, case.name), []).append(
                                run_case(version, case, stacks[case.name], work / case.name))
                    for case, pair in zip(beside, others.result(), strict=True):
                        results.setdefault((version.label, case.name), []).append(pair)
    summarize(report, results, cases, args.runs, timeout)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pi", default="",
                        help="pi versions, comma-separated: 1.6,0.73 (--quick: 1.6)")
    parser.add_argument("--runs", type=int, default=1, help="repetitions of every case")
    parser.add_argument("--cases", default="",
                        help="some of threshold,slow-summary,no-worker,no-drafts (default all)")
    parser.add_argument("--compactions", type=int, default=2,
                        help="compactions per conversation (no-worker: 1)")
    parser.add_argument("--no-worker-timeout-s", type=float, default=None,
                        help="COMPACTOR_PI_TIMEOUT_S in the no-worker case (default: the "
                             "extension's own)")
    parser.add_argument("--logs", default="",
                        help="keep pi's sessions and logs, the worker's and serve's, here")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: short latencies, one compaction, a 5 s "
                             "no-worker timeout")
    return parser.parse_args()


if __name__ == "__main__":
    main()
