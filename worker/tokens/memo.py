"""Per-object results kept across jobs: a message's token count and prompt text, a session's facts.

The snapshot loader hands out the same message objects for unchanged entries
(:class:`worker.store.entry_cache.EntryCache`), so a result computed from a message object stays
valid for as long as that object lives: messages are never changed in place. An
:class:`IdentityMemo` holds the object with its result, so an ``id()`` is never reused while
it is cached. Bounded (least recently used evicted first) and shared by the jobs of a worker's
threads: writes take a lock; a hit takes none (each ``OrderedDict`` operation is atomic under
the GIL, and a key evicted between the lookup and the move to the end is skipped), since a job
makes a hit per message of its session.

The memos live where the worker composes its parts (``worker.service.composition``): the
tokenizer it builds holds the counts, ``worker.compaction.caches.PlanCaches`` the rest.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["DEFAULT_OBJECTS", "IdentityMemo", "PrefixFolds"]

# As many as the entry cache keeps entries (worker.store.entry_cache.DEFAULT_ENTRIES): a memo holds
# its objects alive, so a larger bound would only keep messages that no snapshot hands out again.
DEFAULT_OBJECTS = 20_000
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")


class IdentityMemo(Generic[K, V]):
    """``compute(obj)`` remembered per object identity."""

    def __init__(self, max_objects: int = DEFAULT_OBJECTS) -> None:
        self._known: OrderedDict[int, tuple[K, V]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_objects = max(0, max_objects)

    def __len__(self) -> int:
        return len(self._known)

    def get(self, obj: K, compute: Callable[[K], V]) -> V:
        return self.get_many((obj,), compute)[0]

    def get_many(self, objs: Iterable[K], compute: Callable[[K], V]) -> list[V]:
        """``compute(obj)`` of each of ``objs``, the new results kept together at the end (one
        lock for all). ``compute`` runs outside the lock: other threads' lookups do not wait."""
        known = self._known
        values: list[V] = []
        computed: dict[int, tuple[K, V]] = {}  # an object twice in ``objs`` is computed once
        for obj in objs:
            key = id(obj)
            hit = known.get(key) or computed.get(key)
            if hit is not None and hit[0] is obj:
                try:  # noqa: SIM105  (a hit on every message of a job: no context manager)
                    known.move_to_end(key)
                except KeyError:  # evicted by another thread just now, or computed in this call
                    pass
                values.append(hit[1])
            else:
                value = compute(obj)
                computed[key] = (obj, value)
                values.append(value)
        if computed:
            self.put_many(computed.values())
        return values

    def put(self, obj: K, value: V) -> None:
        """Remember ``value`` for ``obj`` (a result computed elsewhere)."""
        self.put_many([(obj, value)])

    def put_many(self, results: Iterable[tuple[K, V]]) -> None:
        if not self.max_objects:
            return
        known = self._known
        with self._lock:
            for obj, value in results:
                key = id(obj)
                known[key] = (obj, value)
                known.move_to_end(key)
            while len(known) > self.max_objects:
                known.popitem(last=False)

    def __contains__(self, obj: object) -> bool:
        hit = self._known.get(id(obj))
        return hit is not None and hit[0] is obj


class PrefixFolds(Generic[K, S]):
    """Folds over sequences of objects, continued past the longest one folded before.

    A re-plan of a session that grew folds the same 1 000 messages as the last plan, then the
    new ones (the facts they name: ``worker.compaction.fact_fold``). Kept per tag and first
    object (a session's messages after its last compaction): the last few folds' objects and
    states. A
    sequence that starts with a kept fold's objects (the same objects, by identity) is folded
    only past the longest such fold; the same sequence costs one identity check per object.
    A few per session, not one: a session is a tree, and jobs on two branches (or two drafts
    grown from one point) share the messages before the fork. Thread-safe as
    :class:`IdentityMemo`. A fold's state is shared with later jobs: nothing may change it
    once returned.

    Bounded by the objects the kept folds hold (counted once per fold), least recently used
    start evicted first: a fold keeps its messages alive, and the default keeps no more than
    the entry cache keeps (``DEFAULT_OBJECTS``), mostly the same messages.
    """

    def __init__(self, max_objects: int = DEFAULT_OBJECTS, per_start: int = 3) -> None:
        # (tag, id of the first object) -> its folds (objects, state), least recently used first
        self._folds: OrderedDict[tuple[Hashable, int], list[tuple[list[K], S]]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_objects = max(0, max_objects)
        self.per_start = max(1, per_start)
        self._size = 0  # objects held by the kept folds

    def __len__(self) -> int:
        """The folds kept."""
        return sum(map(len, self._folds.values()))

    def fold(self, tag: Hashable, objs: Sequence[K],
             more: Callable[[S | None, Sequence[K], int], S]) -> S:
        """The fold of ``objs`` (under ``tag``: what else the fold depends on, hashable and
        kept alive with it). ``more(state, rest, offset)`` folds ``rest`` (from
        ``objs[offset]``) onto ``state`` (None: nothing yet) and returns a new state; it must
        not change ``state``."""
        if not objs:
            return more(None, objs, 0)
        key = (tag, id(objs[0]))
        known = _longest_prefix(self._folds.get(key, ()), objs)
        if known is not None and len(known[0]) == len(objs):
            self._keep(key, known, known)
            return known[1]
        state = (more(known[1], objs[len(known[0]):], len(known[0])) if known is not None
                 else more(None, objs, 0))
        self._keep(key, known, (list(objs), state))
        return state

    def _keep(self, key: tuple[Hashable, int], used: tuple[list[K], S] | None,
              fold: tuple[list[K], S]) -> None:
        """``fold`` kept as the most recently used of its start (with ``used``, continued)."""
        if len(fold[0]) > self.max_objects:
            return
        with self._lock:
            folds = self._folds.pop(key, [])
            self._size -= _held(folds)
            folds = [f for f in folds if f is not used and f is not fold]
            folds += [used, fold] if used is not None and used is not fold else [fold]
            folds = folds[-self.per_start:]
            self._folds[key] = folds
            self._size += _held(folds)
            while self._size > self.max_objects:
                _, evicted = self._folds.popitem(last=False)
                self._size -= _held(evicted)


def _held(folds: Iterable[tuple[list[K], S]]) -> int:
    return sum(len(objs) for objs, _ in folds)


def _longest_prefix(folds: Iterable[tuple[list[K], S]],
                    objs: Sequence[K]) -> tuple[list[K], S] | None:
    """The fold whose objects are the longest prefix of ``objs`` (None: none is one)."""
    best: tuple[list[K], S] | None = None
    for fold in folds:
        done = fold[0]
        if len(done) <= len(objs) and (best is None or len(done) > len(best[0])) and all(
                map(operator.is_, done, objs)):
            best = fold
    return best
