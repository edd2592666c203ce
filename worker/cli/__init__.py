"""The ``compactor`` command. Subcommands live in private modules, each registering itself."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from api_client.errors import CompactorError

__all__ = ["main"]

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    from worker.cli import _files, _runtime

    parser = argparse.ArgumentParser(prog="compactor", description="Distributed context compaction")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _files.register(commands)
    _runtime.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
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
    return code
