"""Facts counted over a sequence of messages, a fold that a re-plan continues.

The ledger's candidates are the distinct (kind, text) facts the summarised messages name, each
with how often and how recently it was named, without the paths that lie inside a longer one.
A worker that re-plans a session that grew summarises the same messages as before and some new
ones after them: :func:`fold_more` continues a fold from its state
(``worker.tokens.memo.PrefixFolds``, kept in ``PlanCaches``), counting only the new messages'
facts. A state is shared by the jobs that continue it: it is never changed, a continuation
copies it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Fact", "FactFold", "fold_more"]

Key = tuple[str, str]  # (kind, text)


@dataclass
class Fact:
    """A ledger candidate. Shared between jobs once a fold returns it: never changed then."""

    kind: str
    text: str
    count: int = 1
    last: int = 0  # position of the newest message that mentions it (recency)


@dataclass(frozen=True)
class FactFold:
    """A fold's state: every fact counted so far, and the facts in order (oldest first)
    without the paths inside a longer one."""

    facts: dict[Key, Fact]
    listed: tuple[Fact, ...]


def fold_more(state: FactFold | None, carried: Sequence[Key],
              named_at: Iterable[tuple[int, Iterable[Key]]]) -> FactFold:
    """``state`` (None: a fold from the start, ``carried`` first, at position -1) continued by
    the facts named at each position of ``named_at``."""
    facts = dict(state.facts) if state is not None else {}
    for position, named in named_at if state is not None else [(-1, carried), *named_at]:
        for key in named:
            fact = facts.get(key)
            facts[key] = Fact(key[0], key[1], fact.count + 1 if fact else 1, position)
    nested = _nested([text for kind, text in facts if kind == "paths"])
    return FactFold(facts, tuple(f for f in facts.values()
                                 if f.kind != "paths" or f.text not in nested))


def _nested(paths: Sequence[str]) -> set[str]:
    """The paths that lie inside another of ``paths`` (distinct, not empty): found twice in
    them all joined by NULs, once in its own place (one with a NUL is compared pairwise)."""
    joined = "\0".join(paths)
    return {p for p in paths if (joined.count(p) > 1 if "\0" not in p
                                 else any(p in q and p != q for q in paths))}
