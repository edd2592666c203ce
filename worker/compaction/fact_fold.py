"""Facts counted over a sequence of messages, a fold that a re-plan continues.

The ledger's candidates are the distinct (kind, text) facts the summarised messages name, each
with how often and how recently it was named, without the paths that lie inside a longer one.
A worker that re-plans a session that grew summarises the same messages as before and some new
ones after them: :func:`fold_more` continues a fold from its state (``worker.memo.PrefixFolds``
keeps one per session), counting only the new messages' facts and checking only the new paths
for containment. A state is shared by the jobs that continue it: it is never changed, a
continuation copies the counts it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from worker.compaction.substrings import SubstringSearch

__all__ = ["Fact", "FactFold", "fold_more"]

Key = tuple[str, str]  # (kind, text)

# A continuation checks each new path with ``in`` against every path, both ways (large-session
# grown by 10 %: 5 new paths against 60); beyond this many new paths one automaton over all
# the paths, as a fold from the start builds, is cheaper.
_FEW_NEW_PATHS = 32


@dataclass
class Fact:
    """A ledger candidate. Shared between jobs once a fold returns it: never changed then."""

    kind: str
    text: str
    count: int = 1
    last: int = 0  # position of the newest message that mentions it (recency)


@dataclass(frozen=True)
class FactFold:
    """A fold's state: every fact counted so far, the path texts inside a longer path, and
    the facts in order (oldest first) without those."""

    facts: dict[Key, Fact]
    nested: frozenset[str]
    listed: tuple[Fact, ...]


def fold_more(state: FactFold | None, carried: Sequence[Key],
              named_at: Iterable[tuple[int, Iterable[Key]]], search: SubstringSearch) -> FactFold:
    """``state`` (None: a fold from the start, ``carried`` first, at position -1) continued by
    the facts named at each position of ``named_at``."""
    if state is None:
        facts: dict[Key, Fact] = {}
        _count(facts, [(-1, carried)])
        _count(facts, named_at)
        nested = _nested(search, [text for kind, text in facts if kind == "paths"])
    else:
        facts = dict(state.facts)
        added = _count_more(facts, named_at)
        nested = _nested_after(search, state.nested, facts, added)
    listed = tuple(f for f in facts.values() if f.kind != "paths" or f.text not in nested)
    return FactFold(facts, nested, listed)


def _count(facts: dict[Key, Fact], named_at: Iterable[tuple[int, Iterable[Key]]]) -> None:
    """Fold (position, facts named there) into ``facts``: a count and the last position."""
    for position, named in named_at:
        for key in named:
            fact = facts.get(key)
            if fact is None:
                facts[key] = Fact(key[0], key[1], 1, position)
            else:
                fact.count += 1
                fact.last = position


def _count_more(facts: dict[Key, Fact],
                named_at: Iterable[tuple[int, Iterable[Key]]]) -> list[Key]:
    """:func:`_count` onto a copy of a fold's facts: a fact of the fold is replaced, not
    changed (the fold's state is shared). Returns the keys new to ``facts``."""
    made: set[Key] = set()  # the keys whose Fact this call made (and may change)
    added: list[Key] = []
    for position, named in named_at:
        for key in named:
            fact = facts.get(key)
            if fact is None:
                facts[key] = Fact(key[0], key[1], 1, position)
                added.append(key)
            elif key in made:
                fact.count += 1
                fact.last = position
                continue
            else:
                facts[key] = Fact(key[0], key[1], fact.count + 1, position)
            made.add(key)
    return added


def _nested(search: SubstringSearch, paths: Sequence[str]) -> frozenset[str]:
    """The paths inside a longer one: found wherever the longer one is, so only it is kept."""
    inner = search.patterns(paths).containment(range(len(paths))).nested()
    return frozenset(paths[i] for i in inner)


def _nested_after(search: SubstringSearch, before: frozenset[str], facts: dict[Key, Fact],
                  added: Sequence[Key]) -> frozenset[str]:
    """:func:`_nested` of the paths of ``facts``, knowing those inside another before
    ``added`` were: they still are (no fact is removed); a path can only come to lie inside a
    new one, and a new one inside any."""
    new = [text for kind, text in added if kind == "paths"]
    if not new:
        return before
    paths = [text for kind, text in facts if kind == "paths"]
    if len(new) > _FEW_NEW_PATHS:
        return _nested(search, paths)
    nested = set(before)
    for longer in new:
        nested.update(p for p in paths if p in longer and p != longer)
    nested.update(p for p in new if any(p in q and p != q for q in paths))
    return frozenset(nested)
