"""The ledger's lookups: Aho-Corasick and ``in`` per text give ``in``'s answers, and the ledger
gives the same block and counts with either."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from api_client.contract.session import load_session
from worker.compaction import facts
from worker.compaction.facts import Fact, apply_ledger
from worker.compaction.ledger import compaction_ledger
from worker.compaction.prepare import CompactionSettings, prepare_compaction
from worker.compaction.substrings import (
    AhoCorasickSearch,
    PlainSearch,
    SubstringSearch,
    default_search,
)
from worker.tokens import EstimateTokenizer

try:
    import ahocorasick_rs  # noqa: F401  (the fast extra: make install installs it)
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise
    pytest.skip("ahocorasick_rs is not installed (the fast extra)", allow_module_level=True)

SEARCHES: list[SubstringSearch] = [PlainSearch(), AhoCorasickSearch()]


def naive_occurring(needles: Sequence[str], haystack: str) -> set[int]:
    return {i for i, n in enumerate(needles) if n in haystack}


def naive_inside(texts: Sequence[str], index: int, candidates: Sequence[int]) -> list[int]:
    return [j for j in candidates if j != index and texts[j] in texts[index]]


@pytest.mark.parametrize("search", SEARCHES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("needles", "haystack", "found"),
    [
        (["ls", "ls -la", "cat"], "ran ls -la twice", {0, 1}),
        (["a.py", "a.py", "b.py"], "src/a.py", {0, 1}),  # duplicates each answered
        (["", "x"], "abc", {0}),  # an empty needle is in every text
        (["é", "😀 x", "ü"], "café 😀 x", {0, 1}),  # characters, not bytes
        (["ab", "b", "abc"], "xabcx", {0, 1, 2}),  # overlapping matches all count
        (["a\ud800"], "za\ud800", {0}),  # a lone surrogate: answered by ``in``
        (["q"], "a\udfffq", {0}),
        ([], "anything", set()),
        (["x"], "", set()),
    ],
)
def test_occurring(search: SubstringSearch, needles: list[str], haystack: str,
                   found: set[int]) -> None:
    patterns = search.patterns(needles)
    assert patterns.occurring(haystack) == found == naive_occurring(needles, haystack)


@pytest.mark.parametrize("search", SEARCHES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    "texts",
    [
        ["ls", "ls -la", "git status", "status"],
        ["src/a.py", "a.py", "src", "src/a.py"],  # duplicates lie inside each other
        ["multi\nline", "line", "multi"],  # a newline: answered by ``in``
        ["caf\ud800", "caf"],
        ["", "x"],
        ["only"],
        [],
    ],
)
def test_containment(search: SubstringSearch, texts: list[str]) -> None:
    every = list(range(len(texts)))
    within = search.patterns(texts).containment(every)
    for index in every:
        assert within.inside(index, set(every)) == set(naive_inside(texts, index, every))
        some = set(every[::2])
        assert within.inside(index, some) == set(naive_inside(texts, index, sorted(some)))


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("ab é/.-") for _ in range(rng.randint(1, 5)))


@pytest.mark.parametrize("seed", range(40))
def test_generated_texts(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_word(rng) for _ in range(rng.randint(1, 40))]
    haystack = " ".join(_word(rng) for _ in range(rng.randint(0, 200)))
    patterns = AhoCorasickSearch().patterns(texts)
    assert patterns.occurring(haystack) == naive_occurring(texts, haystack)
    # Containment among some of them (the ledger asks among the facts not found).
    among = sorted(rng.sample(range(len(texts)), rng.randint(1, len(texts))))
    within = patterns.containment(among)
    some = set(rng.sample(among, rng.randint(0, len(among))))
    for index in among:
        assert within.inside(index, some) == set(naive_inside(texts, index, sorted(some)))


def _long_text(rng: random.Random) -> str:
    """A longer text, often sharing its first bytes with others (``src/pkg/module_``, then a
    tail that differs: where those bytes match, the text may not)."""
    head = rng.choice(["src/pkg/module_é", "src/pkg/module_", "tests/test_a_b_", "ab"])
    return head + "".join(rng.choice("ab é/.-") for _ in range(rng.randint(0, 20)))


@pytest.mark.parametrize("seed", range(40))
def test_generated_long_texts_sharing_their_first_bytes(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_long_text(rng) for _ in range(rng.randint(1, 30))]
    pieces = [rng.choice(texts) for _ in range(rng.randint(0, 20))]
    # cut and mutated copies: the first bytes match where the whole text does not
    pieces += [t[: rng.randint(0, len(t))] + rng.choice("ab é") for t in texts]
    rng.shuffle(pieces)
    haystack = rng.choice(["", " "]).join(pieces)
    patterns = AhoCorasickSearch().patterns(texts)
    assert patterns.occurring(haystack) == naive_occurring(texts, haystack)
    among = sorted(rng.sample(range(len(texts)), rng.randint(1, len(texts))))
    within = patterns.containment(among)
    for index in among:
        assert within.inside(index, set(among)) == set(naive_inside(texts, index, among))


def test_without_the_wheel_the_plain_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ahocorasick_rs", None)  # import raises ImportError
    assert isinstance(default_search(), PlainSearch)
    monkeypatch.undo()
    assert isinstance(default_search(), AhoCorasickSearch)


def _facts(rng: random.Random) -> list[Fact]:
    kinds = ("paths", "commands", "errors", "requests", "identifiers")
    texts = {" ".join(_word(rng) for _ in range(rng.randint(1, 6))) for _ in range(150)}
    return [Fact(rng.choice(kinds), text, rng.randint(1, 4), rng.randint(0, 99))
            for text in sorted(texts)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("budget", [0, 40, 300, 5000])
def test_the_ledger_is_the_same_with_either_search(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                   budget: int) -> None:
    rng = random.Random(seed)
    found = _facts(rng)
    summary = " ".join(f.text for f in found if rng.random() < 0.3)
    kept = " ".join(_word(rng) for _ in range(300))
    results = []
    for search in SEARCHES:
        monkeypatch.setattr(facts, "SEARCH", search)
        results.append(apply_ledger(found, summary, budget, found_in_normalized=kept))
    assert results[0] == results[1]
    stats = results[0].stats
    assert sum(s["total"] for s in stats.values()) == len(found)
    if budget >= 300:  # room for lines: some lost facts are given one
        assert sum(s["appended"] for s in stats.values()) > 0


def test_the_reference_sessions_ledgers_are_the_same_with_either_search(
        monkeypatch: pytest.MonkeyPatch, pi_file: Path) -> None:
    """Plans cut at a dozen points of each session; summaries holding a third of the facts."""
    tree = load_session(pi_file.read_text(encoding="utf-8")).tree()
    path = list(tree.path_to(tree.leaf_id))
    checked = 0
    for end in range(len(path) // 3, len(path), len(path) // 12):
        prep = prepare_compaction(path[:end], CompactionSettings(), EstimateTokenizer())
        if prep is None:
            continue
        rng = random.Random(end)
        messages = [*prep.messages_to_summarize, *prep.turn_prefix_messages]
        summary = " ".join(f.text for f in facts.extract_facts(messages) if rng.random() < 0.3)
        results = []
        for search in SEARCHES:
            monkeypatch.setattr(facts, "SEARCH", search)
            results.append([compaction_ledger(prep, summary, budget) for budget in (40, 2000)])
        assert results[0] == results[1]
        checked += 1
    assert checked >= 8


def test_threads_share_the_search() -> None:
    # A worker's jobs run on threads (COMPACTOR_POOL=threads): one search serves them all.
    from concurrent.futures import ThreadPoolExecutor

    cases = []
    for seed in range(16):
        rng = random.Random(seed)
        texts = [_word(rng) for _ in range(60)]
        cases.append((texts, " ".join(_word(rng) for _ in range(2000))))
    search = AhoCorasickSearch()

    def answer(case: tuple[list[str], str]) -> tuple[set[int], set[int]]:
        texts, haystack = case
        patterns = search.patterns(texts)
        return patterns.occurring(haystack), patterns.containment(range(60)).inside(0, set(
            range(60)))

    expected = [(naive_occurring(t, h), set(naive_inside(t, 0, range(60)))) for t, h in cases]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(5):
            assert list(pool.map(answer, cases)) == expected
