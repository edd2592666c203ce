"""``compactor session migrate FILE``: a session file migrated to v3 JSONL.

The file commands (this, ``inspect``, ``inspect prompt``) answer "why did it cut here?" without
Redis or a model; with ``--json`` each prints exactly one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from worker.cli.session_files import load_file, session_subparsers

__all__ = ["register"]


def _migrate(args: argparse.Namespace) -> int:
    sys.stdout.write(load_file(args.file).to_jsonl())
    return 0


def register(commands: Any) -> None:
    migrate = session_subparsers(commands).add_parser("migrate",
                                                      help="print the session migrated to v3 JSONL")
    migrate.add_argument("file", metavar="FILE", help="session file (pi JSONL v1, v2 or v3)")
    migrate.set_defaults(handler=_migrate)
