"""Which of many short texts occur in a long one, or inside each other: the fact ledger's lookups.

A compaction's ledger looks 150-250 facts up in the summary and the kept messages (50-60 kB)
and asks, while it chooses the block's lines, which chosen facts lie inside another. ``in`` per
fact already runs at memory speed (~10 µs a fact there), so the only cut left is to read the
text once: an Aho-Corasick automaton over all the facts (the ``ahocorasick_rs`` wheel, in the
``fast`` extra), built once and used for both questions. On large-session's re-plan: 2.2 ms
for the lookup with ``in``, 0.6 ms with the automaton.

Two implementations of one small interface, the same answers (``tests/test_substrings.py``
compares both with ``in`` on tables and generated texts):

* :class:`AhoCorasickSearch` when the wheel imports; texts the automaton cannot take (empty, a
  newline, a lone surrogate: no UTF-8 for it) are answered by the plain search;
* :class:`PlainSearch`: ``in`` per text.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence, Set
from typing import Any, Protocol

__all__ = [
    "AhoCorasickSearch",
    "Containment",
    "Cover",
    "Patterns",
    "PlainSearch",
    "SubstringSearch",
    "default_search",
]


class Cover(Protocol):
    """Texts chosen one by one (the ledger's block lines), and which texts lie inside one."""

    def holds(self, index: int) -> bool:
        """Does ``texts[index]`` lie inside a chosen text?"""
        ...

    def add(self, index: int) -> None: ...

    def reset(self, chosen: Sequence[int]) -> None:
        """Make ``chosen`` the chosen texts (after some were dropped)."""
        ...


class Containment(Protocol):
    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        """Those ``candidates`` (other than ``index``) whose text lies in ``texts[index]``."""
        ...

    def nested(self) -> set[int]:
        """The indexes whose text lies inside another's."""
        ...

    def cover(self) -> Cover:
        """An empty :class:`Cover` over the same texts (asked about these indexes only)."""
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
        return _PlainContainment(self._texts, among)


class _PlainContainment:
    def __init__(self, texts: Sequence[str], among: Sequence[int]) -> None:
        self._texts = texts
        self._among = among

    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        text = self._texts[index]
        return {j for j in candidates if j != index and self._texts[j] in text}

    def nested(self) -> set[int]:
        texts = self._texts
        return {j for j in self._among for i in self._among if i != j and texts[j] in texts[i]}

    def cover(self) -> Cover:
        return _JoinedCover(self._texts)


class _JoinedCover:
    """The chosen texts joined by newlines, and ``in`` (a text holds no newline here)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._texts = texts
        self._joined = ""

    def holds(self, index: int) -> bool:
        return self._texts[index] in self._joined

    def add(self, index: int) -> None:
        self._joined += "\n" + self._texts[index]

    def reset(self, chosen: Sequence[int]) -> None:
        self._joined = "".join("\n" + self._texts[j] for j in chosen)


class AhoCorasickSearch:
    name = "aho-corasick"

    def __init__(self) -> None:
        import functools

        import ahocorasick_rs  # ImportError: the fast extra is not installed

        # A contiguous NFA, not the wheel's choice: for fewer than ~100 patterns it builds a
        # DFA, which takes longer to build (0.25-0.32 ms for the 40-50 paths of a compaction,
        # 0.06-0.08 ms as an NFA) than the ledger's one or two reads of it save.
        self._automaton = functools.partial(
            ahocorasick_rs.BytesAhoCorasick,
            implementation=ahocorasick_rs.Implementation.ContiguousNFA)

    def patterns(self, texts: Sequence[str]) -> Patterns:
        if not all(text and "\n" not in text and _utf8(text) for text in texts):
            return _PlainPatterns(texts)
        return _AutomatonPatterns(texts, self._automaton)


# Texts this short are looked up with ``in`` beside the automaton: "/" and "ls" (facts of most
# sessions) lie in nearly every path and command, and were 800 of large-session's 1 250 matches
# in its kept text, each a tuple made and read in Python.
_SHORT = 2


class _AutomatonPatterns:
    def __init__(self, texts: Sequence[str], automaton: Any) -> None:
        self._texts = texts
        distinct: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            distinct.setdefault(text, []).append(i)
        self._short = [(text, numbers) for text, numbers in distinct.items()
                       if len(text) <= _SHORT]
        longer = {text: numbers for text, numbers in distinct.items() if len(text) > _SHORT}
        self._numbers = list(longer.values())  # the texts' numbers, per pattern
        self._automaton = automaton([t.encode() for t in longer]) if longer else None

    def _matches(self, haystack: bytes) -> list[tuple[int, int, int]]:
        """(pattern, start, end) of each match, offsets in UTF-8 bytes."""
        if self._automaton is None:
            return []
        return self._automaton.find_matches_as_indexes(haystack,  # type: ignore[no-any-return]
                                                       overlapping=True)

    def occurring(self, haystack: str) -> set[int]:
        # Not checked for a lone surrogate first (that encoded the 60 kB of kept text once
        # more each job): encoding it refuses one.
        try:
            matches = self._matches(haystack.encode())
        except UnicodeEncodeError:
            return _PlainPatterns(self._texts).occurring(haystack)
        patterns = set(map(operator.itemgetter(0), matches))
        found = {i for pattern in patterns for i in self._numbers[pattern]}
        return found.union(*(numbers for text, numbers in self._short if text in haystack))

    def containment(self, among: Sequence[int]) -> Containment:
        # The texts joined by newlines (none holds one), read once: a match that starts in
        # text k's span (in UTF-8 bytes) lies inside text k.
        texts = self._texts
        encoded = [texts[k].encode() for k in among]
        starts = [0]
        for utf8 in encoded[:-1]:
            starts.append(starts[-1] + len(utf8) + 1)
        inner: dict[int, set[int]] = {k: set() for k in among}
        for pattern, start, _ in self._matches(b"\n".join(encoded)):
            inner[among[bisect.bisect_right(starts, start) - 1]].update(self._numbers[pattern])
        for text, numbers in self._short:
            for k in among:
                if text in texts[k]:
                    inner[k].update(numbers)
        return _KnownContainment(inner)


class _KnownContainment:
    def __init__(self, inner: dict[int, set[int]]) -> None:
        self._inner = inner  # text number -> the numbers of the texts inside it (itself too)

    def inside(self, index: int, candidates: Set[int]) -> set[int]:
        # The smaller side is walked: a path holds "/" (a fact too), so most paths' inner sets
        # are not empty, and walking the chosen lines for each was 2-3 % of a re-plan.
        inner = self._inner[index]
        if len(inner) > len(candidates):
            return {j for j in candidates if j in inner and j != index}
        return {j for j in inner if j in candidates and j != index}

    def nested(self) -> set[int]:
        among = self._inner.keys()
        return {j for k, inner in self._inner.items() for j in inner if j != k and j in among}

    def cover(self) -> Cover:
        return _KnownCover(self._inner)


class _KnownCover:
    """The union of the chosen texts' inner sets: no text is read again (``in`` over the
    chosen lines was a third of the ledger's choice, 0.2 ms for 200 facts)."""

    def __init__(self, inner: dict[int, set[int]]) -> None:
        self._inner = inner
        self._held: set[int] = set()

    def holds(self, index: int) -> bool:
        return index in self._held

    def add(self, index: int) -> None:
        self._held |= self._inner[index]

    def reset(self, chosen: Sequence[int]) -> None:
        self._held = set().union(*(self._inner[j] for j in chosen))


def _utf8(text: str) -> bool:
    """Can the automaton read ``text``? Not with a lone surrogate (no UTF-8 for it)."""
    if text.isascii():
        return True
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
