"""Which of many short texts occur in a long one, or inside each other: the fact ledger's lookups.

A compaction's ledger looks 150-250 facts up in the summary and the kept messages (50-60 kB)
and asks, while it chooses the block's lines, which chosen facts lie inside another. ``in`` per
fact reads the whole text once per fact, a large share of a warm job's time; an Aho-Corasick
automaton over all the facts (the ``ahocorasick_rs`` wheel, in the ``fast`` extra) reads it
once and answers both questions.

Two implementations of one small interface, the same answers (``tests/test_substrings.py``
compares both with ``in`` on tables and generated texts):

* :class:`AhoCorasickSearch` when the wheel imports; texts the automaton cannot take (empty, a
  newline, a lone surrogate: no UTF-8 for it) are answered by the plain search;
* :class:`PlainSearch`: ``in`` per text.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence, Set
from typing import Any, Protocol

__all__ = [
    "AhoCorasickSearch",
    "Containment",
    "Patterns",
    "PlainSearch",
    "SubstringSearch",
    "default_search",
]


class Containment(Protocol):
    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        """Those ``candidates`` (other than ``index``) whose text lies in ``texts[index]``."""
        ...


class Patterns(Protocol):
    """Texts to look for, numbered as given."""

    def occurring(self, haystack: str) -> set[int]:
        """The indexes of the texts found in ``haystack`` (an empty text always is)."""
        ...

    def containment(self, among: Sequence[int]) -> Containment:
        """What lies inside what among the texts numbered ``among``."""
        ...


class SubstringSearch(Protocol):
    name: str

    def patterns(self, texts: Sequence[str]) -> Patterns: ...


class PlainSearch:
    name = "plain"

    def patterns(self, texts: Sequence[str]) -> Patterns:
        return _PlainPatterns(texts)


class _PlainPatterns:
    def __init__(self, texts: Sequence[str]) -> None:
        self._texts = texts

    def occurring(self, haystack: str) -> set[int]:
        return {i for i, text in enumerate(self._texts) if text in haystack}

    def containment(self, among: Sequence[int]) -> Containment:
        return self

    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        text = self._texts[index]
        return {j for j in candidates if j != index and self._texts[j] in text}


class AhoCorasickSearch:
    name = "aho-corasick"

    def __init__(self) -> None:
        import ahocorasick_rs  # ImportError: the fast extra is not installed

        self._automaton = ahocorasick_rs.BytesAhoCorasick

    def patterns(self, texts: Sequence[str]) -> Patterns:
        if not all(text and "\n" not in text and _utf8(text) for text in texts):
            return _PlainPatterns(texts)
        return _AutomatonPatterns(texts, self._automaton)


class _AutomatonPatterns:
    def __init__(self, texts: Sequence[str], automaton: Any) -> None:
        self._texts = texts
        distinct: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            distinct.setdefault(text, []).append(i)
        self._numbers = list(distinct.values())  # the texts' numbers, per pattern
        self._automaton = automaton([t.encode() for t in distinct]) if distinct else None

    def _matches(self, haystack: bytes) -> list[tuple[int, int, int]]:
        """(pattern, start, end) of each match, offsets in UTF-8 bytes."""
        if self._automaton is None:
            return []
        return self._automaton.find_matches_as_indexes(haystack,  # type: ignore[no-any-return]
                                                       overlapping=True)

    def occurring(self, haystack: str) -> set[int]:
        try:  # encoding refuses a lone surrogate
            matches = self._matches(haystack.encode())
        except UnicodeEncodeError:
            return _PlainPatterns(self._texts).occurring(haystack)
        return {i for pattern in {m[0] for m in matches} for i in self._numbers[pattern]}

    def containment(self, among: Sequence[int]) -> Containment:
        # The texts joined by newlines (none holds one), read once: a match that starts in
        # text k's span (in UTF-8 bytes) lies inside text k.
        encoded = [self._texts[k].encode() for k in among]
        starts = [0]
        for utf8 in encoded[:-1]:
            starts.append(starts[-1] + len(utf8) + 1)
        inner: dict[int, set[int]] = {k: set() for k in among}
        for pattern, start, _ in self._matches(b"\n".join(encoded)):
            inner[among[bisect.bisect_right(starts, start) - 1]].update(self._numbers[pattern])
        return _KnownContainment(inner)


class _KnownContainment:
    def __init__(self, inner: dict[int, set[int]]) -> None:
        self._inner = inner  # text number -> the numbers of the texts inside it (itself too)

    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        return {j for j in self._inner[index] if j in candidates and j != index}


def _utf8(text: str) -> bool:
    """Can the automaton read ``text``? Not with a lone surrogate (no UTF-8 for it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def default_search() -> SubstringSearch:
    """Aho-Corasick when its wheel imports, else ``in`` per text."""
    try:
        return AhoCorasickSearch()
    except ImportError:
        return PlainSearch()
