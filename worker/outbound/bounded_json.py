"""JSON from other parties (model providers, webhooks) parsed with a depth bound.

``json.loads`` recurses once per nesting level: a body of 100 000 ``[`` raises
``RecursionError``, which is not a ``ValueError`` and escaped every ``except ValueError`` that
guarded a parse (the job then failed as an internal error, with no fallback). ``loads_bounded``
measures the depth first, on the body with its strings removed (C-speed regular expressions;
a Python loop only over the brackets), and refuses a body deeper than ``max_depth`` before the
parser sees it. Every failure is a ``ValueError``: ``JsonTooDeep`` or json's own.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

__all__ = ["MAX_DEPTH", "JsonTooDeep", "json_depth", "loads_bounded"]

# The session entries' own bound (api_client's NestingTooDeepError): an answer nested deeper
# could not be stored anyway.
MAX_DEPTH = 64

# A JSON string (escapes included); the unrolled form runs in C without per-character frames.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class JsonTooDeep(ValueError):
    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"JSON nested {depth}+ levels deep; the limit is {limit}")
        self.depth, self.limit = depth, limit


def json_depth(body: bytes, stop_above: int | None = None) -> int:
    """The deepest nesting of brackets outside strings (0 for a scalar); counting stops at the
    first level above ``stop_above``."""
    skeleton = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS).translate(_STEP)
    deepest = 0
    for depth in accumulate(1 if step == 1 else -1 for step in skeleton):
        if depth > deepest:
            deepest = depth
            if stop_above is not None and deepest > stop_above:
                break
    return deepest


def loads_bounded(body: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(body)`` for bodies nested at most ``max_depth`` deep; ``ValueError`` for
    anything else (``JsonTooDeep``, malformed JSON, a RecursionError of the parser)."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    depth = json_depth(raw, stop_above=max_depth)
    if depth > max_depth:
        raise JsonTooDeep(depth, max_depth)
    try:
        return json.loads(raw)
    except RecursionError as err:  # a caller already deep in its stack: still a parse failure
        raise ValueError(f"JSON too deep for the parser: {err}") from err
