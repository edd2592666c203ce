"""Which of many short texts occur in a long one, or inside each other: the fact ledger's lookups.

A compaction's ledger looks 150-250 facts up in the summary and the kept messages (50-60 kB)
and asks, while it chooses the block's lines, which chosen facts lie inside another. ``in`` per
fact already runs at memory speed (~10 µs a fact there), so the only cut left is to read the
text once: an Aho-Corasick automaton over all the facts (the ``ahocorasick_rs`` wheel, in the
``fast`` extra). On large-session's re-plan: 2.2 against 0.6 ms for the lookup.

Two implementations of one small interface, the same answers (``tests/test_substrings.py``
compares both with ``in`` on tables and generated texts):

* :class:`AhoCorasickSearch` when the wheel imports; a text with a lone surrogate (no UTF-8 for
  the automaton) is answered by the plain search;
* :class:`PlainSearch`: ``in`` per text.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = ["AhoCorasickSearch", "PlainSearch", "SubstringSearch", "default_search"]


class SubstringSearch(Protocol):
    name: str

    def occurring(self, needles: Sequence[str], haystack: str) -> set[int]:
        """The indexes of the ``needles`` found in ``haystack`` (an empty needle always is)."""
        ...

    def containment(self, texts: Sequence[str]) -> Containment:
        """What lies inside what among ``texts``."""
        ...


class Containment(Protocol):
    def inside(self, index: int, candidates: Iterable[int]) -> list[int]:
        """Those ``candidates`` (other than ``index``) whose text lies in ``texts[index]``."""
        ...

    def nested(self) -> set[int]:
        """The indexes whose text lies inside another's."""
        ...


class PlainSearch:
    name = "plain"

    def occurring(self, needles: Sequence[str], haystack: str) -> set[int]:
        return {i for i, needle in enumerate(needles) if needle in haystack}

    def containment(self, texts: Sequence[str]) -> Containment:
        return _PlainContainment(texts)


class _PlainContainment:
    def __init__(self, texts: Sequence[str]) -> None:
        self._texts = texts

    def inside(self, index: int, candidates: Iterable[int]) -> list[int]:
        text = self._texts[index]
        return [j for j in candidates if j != index and self._texts[j] in text]

    def nested(self) -> set[int]:
        texts = self._texts
        return {j for j, inner in enumerate(texts)
                for i, outer in enumerate(texts) if i != j and inner in outer}


class AhoCorasickSearch:
    name = "aho-corasick"

    def __init__(self) -> None:
        import ahocorasick_rs  # ImportError: the fast extra is not installed

        self._automaton = ahocorasick_rs.AhoCorasick

    def occurring(self, needles: Sequence[str], haystack: str) -> set[int]:
        if not _utf8(haystack) or not all(map(_utf8, needles)):
            return PlainSearch().occurring(needles, haystack)
        distinct = list(dict.fromkeys(n for n in needles if n))
        found = {distinct[i] for i in self._matches(distinct, haystack)}
        return {i for i, needle in enumerate(needles) if not needle or needle in found}

    def containment(self, texts: Sequence[str]) -> Containment:
        if not all(text and "\n" not in text and _utf8(text) for text in texts):
            return _PlainContainment(texts)
        # All texts joined by newlines (none holds one), read once: a match of text j that
        # starts in text i's span lies inside text i.
        starts = [0]
        for text in texts[:-1]:
            starts.append(starts[-1] + len(text) + 1)
        inner: list[set[int]] = [set() for _ in texts]
        for j, start, _ in self._matches(list(texts), "\n".join(texts), with_spans=True):
            inner[bisect.bisect_right(starts, start) - 1].add(j)
        return _KnownContainment(inner)

    def _matches(self, patterns: list[str], haystack: str, *,
                 with_spans: bool = False) -> Any:
        if not patterns:
            return []
        matches = self._automaton(patterns).find_matches_as_indexes(haystack, overlapping=True)
        return matches if with_spans else (j for j, _, _ in matches)


class _KnownContainment:
    def __init__(self, inner: list[set[int]]) -> None:
        self._inner = inner

    def inside(self, index: int, candidates: Iterable[int]) -> list[int]:
        inner = self._inner[index] - {index}
        return [j for j in candidates if j in inner] if inner else []

    def nested(self) -> set[int]:
        return set().union(*(inner - {i} for i, inner in enumerate(self._inner)))


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
