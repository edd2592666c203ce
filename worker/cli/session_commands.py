"""``session list`` and ``session delete``: the stored sessions an operator sees and removes
(docs/cli.md; retention is ``COMPACTOR_SESSION_TTL_S``). Through the public client,
as a platform would: ``client.sessions.iter_ids()`` (SCAN pages) and ``client.sessions.delete()``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from worker.cli.runtime_settings import load_settings
from worker.cli.session_files import session_subparsers

__all__ = ["register"]


def _session_list(args: argparse.Namespace) -> int:
    from api_client import CompactionClient

    with CompactionClient(load_settings(args).client) as client:
        found = sorted(set(client.sessions.iter_ids(prefix=args.prefix)))  # SCAN may repeat
        if args.json:
            print(json.dumps({"sessionIds": found, "count": len(found)}))
        else:
            for sid in found:  # sorted, as --json
                print(sid)
    return 0


def _session_delete(args: argparse.Namespace) -> int:
    from api_client import CompactionClient, SessionNotFoundError

    with CompactionClient(load_settings(args).client) as client:
        if not client.sessions.delete(args.session_id):
            raise SessionNotFoundError(f"Session {args.session_id} not found")
    if args.json:
        print(json.dumps({"sessionId": args.session_id, "deleted": True}))
    else:
        print(f"deleted {args.session_id}")
    return 0


def register(commands: Any) -> None:
    sessions = session_subparsers(commands)
    listing = sessions.add_parser(
        "list", help="print the ids of the stored sessions, sorted, one a line (SCAN: Redis is "
                     "never blocked, whatever it holds)")
    listing.add_argument("--prefix", default="", metavar="P",
                         help="only sessions whose id starts with P")
    listing.add_argument("--json", action="store_true",
                         help="print one JSON object: sessionIds (sorted) and count")
    listing.set_defaults(handler=_session_list)
    delete = sessions.add_parser(
        "delete", help="delete a stored session (its job records expire on their own); exit 2 "
                       "when there is none")
    delete.add_argument("session_id", metavar="ID", help="stored session id")
    delete.add_argument("--json", action="store_true",
                        help="print one JSON object (sessionId, deleted)")
    delete.set_defaults(handler=_session_delete)
