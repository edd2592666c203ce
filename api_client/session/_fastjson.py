"""JSON parsing of session lines: msgspec's decoder, and ``json.loads`` where they differ.

A worker parses every stored entry of a session it has not seen (1-2 MB for the reference
sessions): ``json.loads`` took 9.0 ms for large-session's entries, msgspec 3.6 ms. msgspec
refuses what the standard parser accepts beyond RFC 8259 (``NaN``, ``Infinity``, a number
beyond a double, a lone surrogate escape); such a line is parsed again by ``json.loads``, so
values and errors are the standard parser's. Integers of any size and floats come out equal
(1.5 million float texts compared in ``tests/session/test_fastjson.py``'s generator).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["loads"]

_DECODER = msgspec.json.Decoder()


def loads(text: str) -> Any:
    """``json.loads(text)``, faster; raises ``json.JSONDecodeError`` as it does."""
    try:
        return _DECODER.decode(text)
    except msgspec.DecodeError:  # ValidationError too (a number beyond a double)
        return json.loads(text)
