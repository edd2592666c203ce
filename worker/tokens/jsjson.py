"""JavaScript-compatible JSON and string lengths (docs/rules.md "JavaScript compatibility").

Token estimates and serialised tool calls must match the reference agent to the character, so
``JSON.stringify`` is reproduced rather than approximated with ``json.dumps``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["js_json", "js_len", "js_number", "js_property_order", "js_sort_key"]

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t"}
_MAX_ARRAY_INDEX = 2**32 - 2
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def js_len(text: str) -> int:
    """Length in UTF-16 code units, as JavaScript's ``String#length``."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_sort_key(text: str) -> bytes:
    """Sort key giving JavaScript's default string order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def _escape_char(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code < 0x20 or 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return char


def _js_string(text: str) -> str:
    if _LONE_SURROGATE.search(text) is None:
        # json's C encoder escapes exactly as JSON.stringify does (short escapes, \u00xx in lower
        # case below 0x20) except for lone surrogates; much faster than the loop below on file
        # contents, which token counts and tool-call serialization meet on every plan.
        return json.dumps(text, ensure_ascii=False)
    return '"' + "".join(_escape_char(c) for c in text) + '"'


def js_number(value: float) -> str:
    """``Number#toString`` for finite numbers; NaN and infinities serialise as ``null``."""
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign, digits_tuple, exponent = Decimal(repr(float(value))).as_tuple()
    digits = "".join(map(str, digits_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = exponent + len("".join(map(str, digits_tuple)))  # decimal point position
    k = len(digits)
    prefix = "-" if sign else ""
    if k <= point <= 21:
        return prefix + digits + "0" * (point - k)
    if 0 < point <= 21:
        return prefix + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return prefix + "0." + "0" * (-point) + digits
    exp = point - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{prefix}{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _is_array_index(key: str) -> bool:
    return (key.isdigit() and key.isascii() and (key == "0" or key[0] != "0")
            and int(key) <= _MAX_ARRAY_INDEX)


def js_property_order(obj: Mapping[str, Any]) -> list[str]:
    """Keys in JavaScript's own-property order: array-index keys first, ascending, then
    insertion order."""
    index_keys = sorted((k for k in obj if _is_array_index(k)), key=int)
    if not index_keys:
        return list(obj)
    return index_keys + [k for k in obj if not _is_array_index(k)]


def js_json(value: Any) -> str:
    """``JSON.stringify(value)`` with no whitespace."""
    if value is None or value is True or value is False:
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(js_json(v) for v in value) + "]"
    if isinstance(value, dict):
        parts = [f"{_js_string(str(k))}:{js_json(value[k])}" for k in js_property_order(value)]
        return "{" + ",".join(parts) + "}"
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")
