"""``compactor worker`` and ``compactor flower``: Celery's worker and Flower with our settings.

Arguments after the command go to Celery / Flower unchanged, so ``--help`` shows our usage and
then the wrapped tool's own options (Celery's click help, Flower's tornado options).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from api_client.contract.errors import ConfigurationError
from worker.cli.runtime_settings import load_settings

__all__ = ["celery_worker_help", "flower_help", "register"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def celery_worker_help() -> str:
    """``celery worker --help``, rendered in this process (no app or broker needed)."""
    from celery.bin.celery import celery

    out = io.StringIO()
    ctx = celery.make_context("celery", ["worker"], resilient_parsing=True)
    worker = celery.get_command(ctx, "worker")
    if worker is None:  # celery without its worker command: nothing more to show
        return ""
    with worker.make_context("worker", [], parent=ctx, resilient_parsing=True) as sub:
        out.write(worker.get_help(sub))
    return out.getvalue()


def flower_help() -> str:
    """Flower's own options (tornado's), without the per-process random cookie secret."""
    import flower.options  # noqa: F401  (defines Flower's options)
    from tornado.options import options

    out = io.StringIO()
    options.print_help(out)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("--address")), 0)
    text = "\n".join(lines[start:])
    return re.sub(r"(--cookie-secret\s+secure cookie secret) \(default[^)]*\)", r"\1", text)


class _HelpWithTool(argparse.Action):
    """``-h/--help``: our usage, then the wrapped tool's options."""

    def __init__(self, option_strings: Sequence[str], dest: str,
                 tool_help: Callable[[], str], title: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.tool_help = tool_help
        self.title = title

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.print_help()
        print(f"\n{self.title}\n\n{self.tool_help()}")
        parser.exit()


def _has_option(extra: list[str], *names: str) -> bool:
    return any(arg == n or arg.startswith(n + "=") for arg in extra for n in names)


def _option_value(extra: list[str], name: str) -> str | None:
    for i, arg in enumerate(extra):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(extra):
            return extra[i + 1]
    return None


def _worker(args: argparse.Namespace) -> int:
    from api_client.contract.routing import QUEUES
    from worker.celery_app import create_app
    from worker.settings import check_startup, model_chain_text

    settings = load_settings(args)
    check_startup(settings)
    print(f"compactor: model chain: {model_chain_text(settings)}", file=sys.stderr)
    argv = ["worker", "--pool", settings.pool, "--concurrency", str(settings.concurrency),
            "--queues", ",".join(QUEUES)]
    if not _has_option(args.extra, "-l", "--loglevel"):
        argv += ["--loglevel", "INFO"]
    create_app(settings).worker_main(argv + list(args.extra))
    return 0


def _flower(args: argparse.Namespace) -> int:
    from worker.celery_app import create_app

    extra = list(args.extra)
    address = _option_value(extra, "--address") or "127.0.0.1"
    has_auth = bool(os.environ.get("FLOWER_BASIC_AUTH")) or _has_option(extra, "--basic-auth")
    if address not in LOOPBACK and not has_auth:
        raise ConfigurationError(
            f"flower on {address} needs basic auth: set FLOWER_BASIC_AUTH=user:password"
        )
    if _option_value(extra, "--address") is None:
        extra.append(f"--address={address}")  # tornado options need the = form
    app = create_app(load_settings(args))
    # Flower consumes nothing: the stock transport, so its Broker tab knows the redis:// URL
    # (the worker's transport class would make the URL
    # "worker.celery_app.broker_transport:Transport://").
    app.conf.broker_transport = None
    code = app.start(["flower", *extra])
    return int(code or 0)


def register(commands: Any) -> None:
    worker = commands.add_parser(
        "worker", add_help=False, help="run a Celery worker (further arguments go to Celery)",
        usage="%(prog)s [-h] [CELERY_OPTION ...]",
        description="Run a Celery worker on every compaction queue. --pool and --concurrency "
                    "come from COMPACTOR_POOL / COMPACTOR_CONCURRENCY, --loglevel is INFO; "
                    "every further argument goes to `celery worker` (and wins).")
    worker.add_argument("-h", "--help", action=_HelpWithTool, tool_help=celery_worker_help,
                        title="Celery worker options (accepted after `compactor worker`):",
                        help="show this help and Celery's worker options, then exit")
    worker.set_defaults(handler=_worker, accepts_extra=True)
    flower = commands.add_parser(
        "flower", add_help=False, help="run Flower (further arguments go to Flower)",
        usage="%(prog)s [-h] [FLOWER_OPTION ...]",
        description="Run Flower against the configured broker. It listens on 127.0.0.1 unless "
                    "--address says otherwise; any other address needs basic auth "
                    "(FLOWER_BASIC_AUTH=user:password or --basic-auth).")
    flower.add_argument("-h", "--help", action=_HelpWithTool, tool_help=flower_help,
                        title="Flower options (accepted after `compactor flower`, in the "
                              "--name=value form):",
                        help="show this help and Flower's options, then exit")
    flower.set_defaults(handler=_flower, accepts_extra=True)
