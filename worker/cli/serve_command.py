"""``compactor serve``: the HTTP API (:mod:`api_client.server`), imported when it runs, so the
other commands never load FastAPI."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(commands: Any) -> None:
    from api_client.server.serving import add_options  # argparse only: no FastAPI yet

    parser = commands.add_parser(
        "serve", help="serve the HTTP API (sessions, jobs, events, /v1/summarize)",
        description="Serve the HTTP API on uvicorn. Bearer tokens come from "
                    'COMPACTOR_API_TOKENS (a JSON object {"<token>": "default"}); without one '
                    "the server refuses to start unless --insecure-no-auth on loopback.")
    add_options(parser)
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from api_client.server.serving import run

    return run(args, redis_url=args.redis_url)
