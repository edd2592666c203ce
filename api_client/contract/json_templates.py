"""Text built once with stand-ins, then filled per call (pure; the request path's JSON).

An enqueue that may apply a draft carries that draft's job record and two event JSONs, built
by the wire models (pydantic) for every call although a draft is rarely there. Only the job id,
session id and time differ between two such calls, so :func:`template` renders the text once
with stand-ins for them (:data:`SLOTS`) and :meth:`Template.fill` puts the call's values in:
the same bytes the models would write (``tests/client/test_json_templates.py`` checks it over
ids that need JSON escaping). Kept because bench_enqueue shows it: rendering through the models
on every call made ``compact()`` measurably slower (issue 28).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SLOTS", "Template", "escaped", "quoted", "template"]

# A stand-in per value. NUL cannot occur in a session id (keys.check_session_id) or a time, so
# a stand-in never meets a real value; in JSON it reads as \u0000 (ensure_ascii or not).
SLOTS: dict[str, str] = {name: f"\x00{name}\x00" for name in ("job", "sid", "ts")}
_STAND_IN = re.compile(r"\x00(job|sid|ts)\x00|\\u0000(job|sid|ts)\\u0000")


# What json.dumps escapes with ensure_ascii off: quote, backslash and the C0 controls.
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')
# With ensure_ascii on, everything but printable ASCII is escaped too (DEL included).
_NOT_PLAIN_ASCII = re.compile(r'[^ !#-\[\]-~]')


def escaped(value: str) -> str:
    """``value`` as it appears inside a JSON string (json.dumps, ensure_ascii off)."""
    if _NEEDS_ESCAPE.search(value) is None:  # ids and times: a search costs a fifth of a dump
        return value
    return json.dumps(value, ensure_ascii=False)[1:-1]


def quoted(value: str) -> str:
    """``json.dumps(value)`` (ensure_ascii on, as kombu writes its envelopes)."""
    if _NOT_PLAIN_ASCII.search(value) is None:
        return f'"{value}"'
    return json.dumps(value)


@dataclass(frozen=True, slots=True)
class Template:
    """Literal text and slots, alternating: ``literals[0] slot[0] literals[1] ...``. A slot is
    ``(name, in_json)``: in JSON it takes the escaped value."""

    literals: tuple[str, ...]
    slots: tuple[tuple[str, bool], ...]

    def fill(self, raw: Mapping[str, str], json_escaped: Mapping[str, str]) -> str:
        if not self.slots:
            return self.literals[0]
        out = [self.literals[0]]
        for (name, in_json), literal in zip(self.slots, self.literals[1:], strict=True):
            out.append(json_escaped[name] if in_json else raw[name])
            out.append(literal)
        return "".join(out)


def template(text: str) -> Template:
    """Split ``text`` (rendered with :data:`SLOTS` as values) at its stand-ins."""
    literals: list[str] = []
    slots: list[tuple[str, bool]] = []
    start = 0
    for found in _STAND_IN.finditer(text):
        literals.append(text[start:found.start()])
        slots.append((found.group(1) or found.group(2), found.group(2) is not None))
        start = found.end()
    literals.append(text[start:])
    return Template(tuple(literals), tuple(slots))
