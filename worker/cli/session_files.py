"""What the file commands share: loading a session file, the path to a leaf, printing a result,
and the ``session`` command group that file and runtime commands both add to.

With ``--json`` every command prints exactly one JSON object (the acceptance checks' contract).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from api_client.contract.errors import SessionFormatError
from api_client.contract.session import Entry, Session, load_session

__all__ = ["HELP", "emit", "leaf_path", "load_file", "session_subparsers"]

# Help of the options several file commands share (argparse expands %(default)s).
HELP = {
    "file": "session file (pi JSONL, any version)",
    "tokenizer": "token counter: tiktoken (cl100k_base) or estimate (chars/4, as the reference "
                 "agent counts) (default: %(default)s)",
    "keep_recent_tokens": "tokens of recent context kept verbatim (default: %(default)s)",
    "reserve_tokens": "tokens reserved for the summary; also bounds its length "
                      "(default: %(default)s)",
    "context_window": "model context window the branch summary must fit (default: %(default)s)",
    "json": "print one JSON object",
}


# Each argparse ``commands`` object's session group. Weak keys: a registry keyed by id() breaks
# when ids are reused, and one holding the parsers would keep them alive.
_SESSION_GROUPS: WeakKeyDictionary[Any, Any] = WeakKeyDictionary()


def session_subparsers(commands: Any) -> Any:
    """The shared ``session`` command group (runtime commands add import/export to it)."""
    group = _SESSION_GROUPS.get(commands)
    if group is None:
        parser = commands.add_parser("session", help="session files and stored sessions")
        group = parser.add_subparsers(dest="session_command", required=True, metavar="ACTION")
        _SESSION_GROUPS[commands] = group
    return group


def load_file(path: str) -> Session:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SessionFormatError(f"cannot read file ({err.__class__.__name__}: {err})",
                                 source=path) from err
    session = load_session(text, source=path)
    for warning in session.warnings:
        print(f"compactor: warning: {warning}", file=sys.stderr)
    return session


def leaf_path(session: Session, leaf: str | None) -> list[Entry]:
    tree = session.tree()
    if leaf is not None and leaf not in tree.by_id:
        raise SessionFormatError(f"leaf entry {leaf!r} does not exist", source=session.source)
    return tree.path_to(leaf or tree.leaf_id)


def emit(args: argparse.Namespace, payload: dict[str, Any], readable: str | None = None) -> int:
    if args.json:
        print(json.dumps(payload, ensure_ascii=False))
    else:
        print(readable if readable is not None else _readable(payload))
    return 0


def _readable(payload: dict[str, Any]) -> str:
    lines = []
    for key, value in payload.items():
        if isinstance(value, list) and len(value) > 8:
            value = (f"{len(value)} items: {', '.join(map(str, value[:4]))}, ..., "
                     f"{', '.join(map(str, value[-2:]))}")
        lines.append(f"{key}: {value}")
    return "\n".join(lines)
