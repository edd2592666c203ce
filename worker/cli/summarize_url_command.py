"""``summarize-url``: the summarize URL of an API token, ``<server>/v1/summarize/<secret>``, for
oh-my-pi's ``compaction.remoteEndpoint`` (docs/oh-my-pi.md; the secret's derivation:
:mod:`api_client.server.summarize_url`).

The token is the user's own (``COMPACTOR_TOKEN``, as the pi extension reads it, else one line on
stdin: never an argument, which ``ps`` would show), or, for an operator, every token of
``--tenant`` in ``COMPACTOR_API_TOKENS`` (one URL a line).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

from api_client.contract.errors import ConfigurationError

__all__ = ["register"]


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "summarize-url", help="print the summarize URL of an API token (oh-my-pi's "
                              "compaction.remoteEndpoint)",
        description="Print <server>/v1/summarize/<secret>: the URL oh-my-pi posts its summaries "
                    "to, with the secret derived from a token. The token: COMPACTOR_TOKEN, else "
                    "one line on stdin; with --tenant, every token of that tenant in "
                    "COMPACTOR_API_TOKENS (the server's table).")
    parser.add_argument("--base-url", metavar="URL", default=None,
                        help="the server as oh-my-pi reaches it (default: "
                             "http://COMPACTOR_API_HOST:COMPACTOR_API_PORT)")
    parser.set_defaults(handler=_print_urls)


def _base_url(given: str | None) -> str:
    if given:
        return given
    host = os.environ.get("COMPACTOR_API_HOST") or "127.0.0.1"
    return f"http://{host}:{os.environ.get('COMPACTOR_API_PORT') or 8080}"


def _tenant_tokens(tenant: str) -> list[str]:
    raw = os.environ.get("COMPACTOR_API_TOKENS")
    if not raw:
        raise ConfigurationError("--tenant reads the tokens of COMPACTOR_API_TOKENS: it is not set")
    try:
        table = json.loads(raw)
    except ValueError:
        raise ConfigurationError("COMPACTOR_API_TOKENS is not JSON") from None
    tokens = [t for t, name in table.items() if name == tenant] if isinstance(table, dict) else []
    if not tokens:
        raise ConfigurationError(f"no token of tenant {tenant!r} in COMPACTOR_API_TOKENS")
    return tokens


def _own_token() -> str:
    token = os.environ.get("COMPACTOR_TOKEN") or (
        getpass.getpass("Compactor token: ") if sys.stdin.isatty() else sys.stdin.readline())
    token = token.strip()
    if len(token) < 16:
        raise ConfigurationError("no token: set COMPACTOR_TOKEN or give it on stdin "
                                 "(16 characters or more)")
    return token


def _print_urls(args: argparse.Namespace) -> int:
    from api_client.server.summarize_url import summarize_url

    tokens = _tenant_tokens(args.tenant) if args.tenant else [_own_token()]
    base = _base_url(args.base_url)
    for token in tokens:
        print(summarize_url(base, token))
    return 0
