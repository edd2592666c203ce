"""``worker.tokens.memo.IdentityMemo``: per-object results, bounded, hits without a lock."""

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from worker.tokens.memo import IdentityMemo


class Obj:
    def __init__(self, n: int) -> None:
        self.n = n


def test_a_result_is_kept_per_object_not_per_equal_value() -> None:
    memo: IdentityMemo[list[int], int] = IdentityMemo()
    calls: list[int] = []
    a, b = [1, 2], [1, 2]
    assert memo.get(a, lambda x: calls.append(1) or sum(x)) == 3
    assert memo.get(a, lambda x: pytest.fail("computed again")) == 3
    assert memo.get(b, lambda x: calls.append(1) or 30) == 30  # equal, not the same object
    assert len(calls) == 2 and a in memo and b in memo and [1, 2] not in memo


def test_the_least_recently_used_object_is_evicted_first() -> None:
    memo: IdentityMemo[Obj, int] = IdentityMemo(max_objects=2)
    first, second, third = Obj(1), Obj(2), Obj(3)
    memo.get(first, lambda o: o.n)
    memo.get(second, lambda o: o.n)
    memo.get(first, lambda o: pytest.fail("a hit"))  # first is now the most recent
    memo.get(third, lambda o: o.n)
    assert first in memo and third in memo and second not in memo and len(memo) == 2


def test_get_many_answers_as_get_computes_only_the_misses_and_refreshes_the_hits() -> None:
    memo: IdentityMemo[Obj, int] = IdentityMemo(max_objects=3)
    a, b, c, d = Obj(1), Obj(2), Obj(3), Obj(4)
    memo.get(a, lambda o: o.n * 10)
    memo.get(b, lambda o: o.n * 10)
    computed: list[int] = []

    def compute(o: Obj) -> int:
        computed.append(o.n)
        return o.n * 10

    assert memo.get_many([c, a, c, Obj(1)], compute) == [30, 10, 30, 10]
    assert computed == [3, 1]  # c once (then a hit), the equal Obj(1) is not a
    assert b not in memo  # a was refreshed, b the least recently used: evicted
    assert memo.get_many([], compute) == []
    memo.get_many([d], compute)
    assert a not in memo and c in memo and d in memo  # a (refreshed before c) evicted next


def test_eight_threads_hit_and_evict_at_once_and_every_result_is_its_objects() -> None:
    # Hits take no lock: a key another thread evicts between the lookup and the move to the
    # end must neither raise nor hand out another object's result. A small bound and a short
    # switch interval make evictions race the hits.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    memo: IdentityMemo[Obj, int] = IdentityMemo(max_objects=64)
    objects = [Obj(n) for n in range(256)]

    def worker(seed: int) -> int:
        wrong = 0
        for i in range(20_000):
            obj = objects[(i * (seed + 3)) % len(objects)]
            wrong += memo.get(obj, lambda o: o.n * 10) != obj.n * 10
        return wrong

    try:
        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(worker, range(8))) == 0
    finally:
        sys.setswitchinterval(old)
    assert len(memo) <= 64
