"""Runtime commands: session import/export, compact, prune, branch-summary, cancel, events, job,
demo. They talk to Redis through :class:`api_client.CompactionClient` (``worker`` and ``flower``
are in :mod:`worker.cli.celery_commands`); the global ``--redis-url`` overrides the environment.

With ``--json`` a command prints one JSON object (``events --json``: one per line). Errors are one
line on stderr and exit status 2 (the dispatcher prints every ``CompactorError``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api_client.contract.errors import JobError
from worker.cli.runtime_settings import load_settings
from worker.cli.session_files import session_subparsers

if TYPE_CHECKING:
    from api_client import CompactionClient, JobHandle, JobRecord

__all__ = ["record_json", "register"]

EXIT_JOB_FAILED = 2


def _client(args: argparse.Namespace) -> CompactionClient:
    from api_client import CompactionClient

    return CompactionClient(load_settings(args).client)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False))


# -- sessions ---------------------------------------------------------------------------------
def _session_import(args: argparse.Namespace) -> int:
    from api_client.contract.errors import SessionFormatError

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SessionFormatError(f"cannot read file ({type(err).__name__}: {err})",
                                 source=args.file) from err
    with _client(args) as client:
        source = "<stdin>" if args.file == "-" else args.file
        print(client.sessions.import_jsonl(text, args.session_id, replace=args.replace,
                                           source=source))
    return 0


def _session_export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        sys.stdout.write(client.sessions.export_jsonl(args.session_id))
    return 0


# -- jobs -------------------------------------------------------------------------------------
# A list longer than this (a prune's entry ids: thousands on a long session) is shown by its
# first items and a count, unless --full.
LIST_SHOWN = 10


def shortened(value: Any, full: bool = False) -> Any:
    """``value`` with every list longer than :data:`LIST_SHOWN` cut to its first items and a
    ``<key>Omitted`` count beside it (JSON objects) or a trailing note (lists of lists)."""
    if full:
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, list) and len(item) > LIST_SHOWN:
                out[key] = [shortened(x) for x in item[:LIST_SHOWN]]
                out[f"{key}Omitted"] = len(item) - LIST_SHOWN
            else:
                out[key] = shortened(item)
        return out
    if isinstance(value, list):
        return [shortened(x) for x in value]
    return value


def record_json(record: JobRecord, full: bool = True) -> dict[str, Any]:
    """The ``--wait`` / ``job --json`` shape: every key always present (null when unknown);
    ``costUsd`` is the record's cost at the candidates' prices when the worker stored one.
    Without ``full``, long lists are shortened (:func:`shortened`)."""
    shown: dict[str, Any] = shortened(_record_json(record), full)
    return shown


def _record_json(record: JobRecord) -> dict[str, Any]:
    wire = record.to_wire()
    return {
        "jobId": record.id, "kind": record.kind.value,
        "reason": record.reason.value if record.reason else None, "state": record.state.value,
        "enqueuedAt": record.created_at or None, "startedAt": record.started_at,
        "finishedAt": record.finished_at, "attempts": record.attempts, "model": record.model,
        "usage": record.usage.to_wire() if record.usage else None,
        "costUsd": wire.get("costUsd", (record.result or {}).get("costUsd")),
        "error": record.error, "entry": record.entry,
        "result": record.result, "fromDraft": bool((record.result or {}).get("fromDraft")),
    }


def _describe(record: JobRecord, full: bool = False) -> str:
    lines = [f"job {record.id}: {record.state.value} ({record.kind.value}"
             + (f", {record.reason.value}" if record.reason else "")
             + f", attempts {record.attempts})"]
    if (record.result or {}).get("fromDraft"):
        lines.append("from draft: yes (applied by the client, no model call)")
    times = [f"{label} {value}" for label, value in (
        ("enqueued", record.created_at), ("started", record.started_at),
        ("finished", record.finished_at)) if value]
    if times:
        lines.append(", ".join(times))
    if record.error:
        lines.append(f"error: {record.error}")
    if record.entry:
        entry = record.entry
        lines.append(f"entry: {entry.get('type')} {entry.get('id')} "
                     f"(parent {entry.get('parentId')})")
        if isinstance(entry.get("summary"), str):
            lines.append(entry["summary"])
    if record.result:
        result = shortened(record.result, full)
        lines.append("result: " + json.dumps(result, ensure_ascii=False))
        if not full and result != record.result:
            lines.append(f"(lists cut to {LIST_SHOWN} items: --full shows all)")
    if record.model:
        usage = record.usage.to_wire() if record.usage else {}
        lines.append(f"model: {record.model} usage: {json.dumps(usage)}")
    return "\n".join(lines)


def _wait(handle: JobHandle, timeout: float) -> None:
    """Block until the job ends; on a terminal, show the elapsed time and state meanwhile."""
    done = threading.Event()
    failure: list[BaseException] = []

    def waiter() -> None:
        try:
            handle.wait(timeout)
        except JobError:
            pass  # the record tells
        except BaseException as err:  # re-raised in the main thread
            failure.append(err)
        finally:
            done.set()

    threading.Thread(target=waiter, daemon=True).start()
    started, tty = time.monotonic(), sys.stderr.isatty()
    while not done.wait(0.25 if tty else 1.0):
        if tty:
            state = handle.record().state.value
            sys.stderr.write(f"\r{handle.id}: {state} {time.monotonic() - started:5.1f} s ")
            sys.stderr.flush()
    if tty:
        sys.stderr.write("\r\033[K")
    if failure:
        raise failure[0]


def _finish(args: argparse.Namespace, client: CompactionClient, handle: JobHandle) -> int:
    if not args.wait:
        state = handle.record().state.value
        if args.json:
            _print_json({"jobId": handle.id, "state": state, "fromDraft": handle.from_draft})
        else:
            print(f"{handle.id} {state}" + (" (coalesced)" if handle.coalesced else "")
                  + (" (from draft)" if handle.from_draft else ""))
        return 0
    _wait(handle, args.timeout)
    record = handle.record()
    if args.json:
        _print_json(record_json(record, args.full))
    else:
        print(_describe(record, args.full))
    if record.state.value in ("queued", "running"):
        print(f"compactor: error: job {record.id} did not finish within {args.timeout:g} s",
              file=sys.stderr)
        return EXIT_JOB_FAILED
    return 0 if record.state.value == "succeeded" else EXIT_JOB_FAILED


def _compact(args: argparse.Namespace) -> int:
    with _client(args) as client:
        handle = client.compact(args.session_id, reason=args.reason, instructions=args.instructions,
                                context_window=args.context_window)
        return _finish(args, client, handle)


def _prune(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _finish(args, client, client.prune(args.session_id))


def _branch_summary(args: argparse.Namespace) -> int:
    with _client(args) as client:
        handle = client.branch_summary(args.session_id, args.to, instructions=args.instructions)
        return _finish(args, client, handle)


def _cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        before = client.jobs.get(args.job_id).state
        after = before if before.terminal else client.jobs.request_cancel(args.job_id)
    job = args.job_id
    if before.terminal or (after.terminal and after.value != "cancelled"):
        action, message = "none", f"{job} already {after.value}: nothing to cancel"
    elif after.value == "cancelled":
        action, message = "cancelled", f"cancelled {job} (was {before.value})"
    else:  # still running: the worker sees the flag at its next check and stops
        action, message = "requested", f"cancel requested for {job} (was {after.value})"
    if args.json:
        _print_json({"jobId": job, "state": after.value, "previousState": before.value,
                     "action": action})
    else:
        print(message)
    return 0


def _job(args: argparse.Namespace) -> int:
    with _client(args) as client:
        record = client.jobs.get(args.job_id)
    if args.json:
        _print_json(record_json(record, args.full))
    else:
        print(_describe(record, args.full))
    return 0


def _events(args: argparse.Namespace) -> int:
    with _client(args) as client:
        reader = client.events(args.session, follow=args.follow, since=args.since)
        try:
            _print_events(args, reader)
        finally:
            reader.close()
    return 0


def _print_events(args: argparse.Namespace, reader: Any) -> None:
    for event in reader:
        if args.json:  # with its stream id: what --since takes to go on from it
            _print_json({**json.loads(event.to_json()), "streamId": event.stream_id})
            sys.stdout.flush()
        else:
            what = event.state.value if event.state else ""
            error = f" {event.error}" if event.error else ""
            print(f"{event.timestamp} {event.type.value:<16} {event.job_id} {what}{error}",
                  flush=True)


def _demo(args: argparse.Namespace) -> int:
    from worker.cli.demo import run_demo

    return run_demo(redis_url=args.redis_url)


# -- registration -----------------------------------------------------------------------------
def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true",
                        help="wait for the job to end and print its record (exit 2 unless it "
                             "succeeded)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                        help="how long --wait waits (default: %(default)g)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _full_option(parser)


def _full_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true",
                        help=f"print every item of long lists (default: the first {LIST_SHOWN} "
                             "and a count)")


def _session_commands(commands: Any) -> None:
    sessions = session_subparsers(commands)
    imp = sessions.add_parser("import", help="store a pi JSONL session in Redis; prints its id")
    imp.add_argument("file", metavar="FILE", help="JSONL file ('-': stdin)")
    imp.add_argument("--session-id", help="store under this id (default: the header's)")
    imp.add_argument("--replace", action="store_true", help="replace a stored session")
    imp.set_defaults(handler=_session_import)
    exp = sessions.add_parser("export", help="print a stored session as JSONL")
    exp.add_argument("session_id", metavar="ID", help="stored session id")
    exp.set_defaults(handler=_session_export)


def _job_commands(commands: Any) -> None:
    compact = commands.add_parser("compact", help="enqueue a compaction")
    compact.add_argument("session_id", metavar="ID", help="stored session id")
    compact.add_argument("--reason", choices=("manual", "threshold", "overflow", "speculative"),
                         default="manual",
                         help="why it is asked for: manual (the default), threshold, overflow, "
                              "or speculative (computes a draft to apply later)")
    compact.add_argument("--instructions", help="custom summary instructions")
    compact.add_argument("--context-window", type=int, metavar="N",
                         help="the agent's context window: the threshold the loop guard judges "
                              "'ineffective' against")
    _job_options(compact)
    compact.set_defaults(handler=_compact)

    prune = commands.add_parser("prune", help="enqueue a tool-output prune pass")
    prune.add_argument("session_id", metavar="ID", help="stored session id")
    _job_options(prune)
    prune.set_defaults(handler=_prune)

    branch = commands.add_parser("branch-summary", help="summarise the branch left for ENTRY")
    branch.add_argument("session_id", metavar="ID", help="stored session id")
    branch.add_argument("--to", required=True, metavar="ENTRY", help="target entry id")
    branch.add_argument("--instructions", help="replaces the branch-summary prompt")
    _job_options(branch)
    branch.set_defaults(handler=_branch_summary)

    cancel = commands.add_parser("cancel", help="cancel a job and say what happened")
    cancel.add_argument("job_id", metavar="JOB", help="job id (as compact/prune print it)")
    cancel.add_argument("--json", action="store_true",
                        help="print one JSON object (jobId, state, previousState, action)")
    cancel.set_defaults(handler=_cancel)

    job = commands.add_parser("job", help="show a job record")
    job.add_argument("job_id", metavar="ID", help="job id")
    job.add_argument("--json", action="store_true", help="print the record as one JSON object")
    _full_option(job)
    job.set_defaults(handler=_job)


def register(commands: Any) -> None:
    _session_commands(commands)
    _job_commands(commands)

    events = commands.add_parser("events", help="print job events")
    events.add_argument("--session", metavar="ID", help="one session's events (default: all)")
    events.add_argument("--follow", action="store_true", help="wait for new events")
    events.add_argument("--since", metavar="ID",
                        help="'start', 'now' or a stream id (an event's streamId): the events "
                             "after it (default: 'now' with --follow, else 'start')")
    events.add_argument("--json", action="store_true", help="one JSON object per line")
    events.set_defaults(handler=_events)

    demo = commands.add_parser("demo", help="run the whole pipeline on a sample session")
    demo.set_defaults(handler=_demo)
