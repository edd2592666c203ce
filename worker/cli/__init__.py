"""The ``compactor`` command. Each command module adds its subcommands; all are registered here.

- ``file_commands``: ``session migrate``; ``inspect_commands``:
  ``inspect context|plan|prune|branch``; ``prompt_commands``: ``inspect prompt`` (all on session
  files, no Redis; shared helpers in ``session_files``);
- ``celery_commands``: ``worker`` and ``flower`` (their ``--help`` adds Celery's / Flower's own);
- ``runtime_commands``: ``session import|export``, the job commands, ``demo``;
- ``session_commands``: ``session list|delete`` (stored sessions);
- ``tenant_commands``: ``tenant quota|show`` (a tenant's quota overrides, stored bytes, queue);
- ``usage_command``: ``usage`` (the tenants' model spend per day);
- ``serve_command``: ``serve``, the HTTP API (``api_client.server``, imported when it runs);
- ``summarize_url_command``: ``summarize-url`` (oh-my-pi's remote endpoint for a token).

The global ``--redis-url`` (before or after the command) overrides ``COMPACTOR_REDIS_URL`` for
every command that talks to Redis, and ``--tenant`` ``COMPACTOR_TENANT`` for the commands on
sessions and jobs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

from api_client.contract.errors import CompactorError

__all__ = ["main"]

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    from worker.cli import (
        celery_commands,
        file_commands,
        inspect_commands,
        prompt_commands,
        runtime_commands,
        serve_command,
        session_commands,
        summarize_url_command,
        tenant_commands,
        usage_command,
    )

    parser = argparse.ArgumentParser(prog="compactor", description="Distributed context compaction")
    parser.add_argument(
        "--redis-url", metavar="URL", default=None,
        help="Redis for sessions and jobs (and broker/results unless COMPACTOR_BROKER_URL / "
             "COMPACTOR_RESULT_BACKEND are set); overrides COMPACTOR_REDIS_URL")
    parser.add_argument(
        "--tenant", metavar="TENANT", default=None,
        help="the tenant whose sessions and jobs the session and job commands act on, and "
             "whose spend `usage` shows; overrides COMPACTOR_TENANT (default: default)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    file_commands.register(commands)
    prompt_commands.register(inspect_commands.register(commands))
    celery_commands.register(commands)
    runtime_commands.register(commands)
    session_commands.register(commands)
    tenant_commands.register(commands)
    usage_command.register(commands)
    serve_command.register(commands)
    summarize_url_command.register(commands)
    return parser


# What the base install (the platform's client) lacks: the command needs the worker extra.
WORKER_EXTRA = ("celery", "httpx", "tiktoken", "pluggy", "prometheus_client")


GLOBAL_OPTIONS = ("--redis-url", "--tenant")


def global_options_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with the global options moved before the command, so that
    ``compactor compact ID --redis-url URL`` means what ``compactor --redis-url URL compact ID``
    does. Stops at ``--`` (what follows belongs to Celery)."""
    front: list[str] = []
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            takes_value = "=" not in arg and i + 1 < len(args)
            front += args[i:i + 2] if takes_value else [arg]
            i += 2 if takes_value else 1
            continue
        rest.append(arg)
        i += 1
    return front + rest


def _quiet_on_closed_pipe() -> int:
    """stdout's reader went away (``| head``): stop quietly, as Unix tools do."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    missing = [name for name in WORKER_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(f"compactor: error: the worker extra is not installed (no {', '.join(missing)}): "
              "in the Compactor checkout, pip install -e '.[worker]'", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args, extra = parser.parse_known_args(
        global_options_first(sys.argv[1:] if argv is None else argv))
    if extra and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        code: int = args.handler(args)
    except CompactorError as err:
        # Operators get one line naming the problem, never a traceback.
        print(f"compactor: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _quiet_on_closed_pipe()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _quiet_on_closed_pipe()
    return code
