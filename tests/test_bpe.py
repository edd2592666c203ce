"""The cl100k counters (``worker.tokens.bpe``): rs_bpe gives tiktoken's numbers, the choice
is a setting, and a missing wheel falls back (auto) or fails at start-up (rs-bpe)."""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_tokens import _ALPHABET

from api_client.contract.errors import ConfigurationError
from helpers.sessions import user
from worker.tokens import JobTokenizer, TiktokenTokenizer, TokenCache, bpe
from worker.tokens import counting as counting_module

ENCODE = TiktokenTokenizer.encoding().encode_ordinary


def _rs_bpe() -> bpe.Cl100kCounter:
    try:
        return bpe.RsBpeCounter()
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the rs_bpe wheel is missing (make install installs the 'fast' extra)")
        pytest.skip("rs_bpe is not installed")


@pytest.fixture
def rs() -> bpe.Cl100kCounter:
    return _rs_bpe()


@pytest.fixture(autouse=True)
def _restore_choice() -> Iterator[None]:
    before = bpe._CHOICE[0]
    yield
    bpe.choose_counter(before)


@pytest.mark.parametrize("text", [
    "", "hello world", "<|endoftext|> counts as text", "<|fim_prefix|>x", "don't 'll 've 's",
    "a" * 100_000, " " * 50_000, "1" * 30_000, "\n" * 20_000, "😀" * 5_000, "\r\n\r\n  \t x",
    "İstanbul ǅ Ⅻ ٣ ² ½ ﬁ １", "漢字かなカナ", "\u200b\ufeff\u2028\u00a0", "\x00\x7f",
    '{"path": "/a/b.ts", "oldText": "x\\ny"}', "./.git/objects/12/4abf0b10332deed53ad78c796d",
])
def test_rs_bpe_counts_what_tiktoken_counts(rs: bpe.Cl100kCounter, text: str) -> None:
    assert rs.count(text) == len(ENCODE(text))


@pytest.mark.parametrize("seed", range(4))
def test_rs_bpe_agrees_on_generated_texts(rs: bpe.Cl100kCounter, seed: int) -> None:
    # The characters that decide where cl100k's pattern cuts, in 2 000 texts per seed.
    rng = random.Random(seed)
    for _ in range(2_000):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 80)))
        assert rs.count(text) == len(ENCODE(text)), repr(text)


def test_rs_bpe_agrees_on_every_text_of_the_reference_sessions(
        rs: bpe.Cl100kCounter, pi_file: Path) -> None:
    texts = list(_texts(json.loads(line) for line in pi_file.read_text("utf-8").splitlines()))
    assert sum(map(len, texts)) > 500_000
    assert [rs.count(t) for t in texts] == [len(ENCODE(t)) for t in texts]


def _texts(values: Iterator[Any]) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            yield from _texts(iter(value.values()))
        elif isinstance(value, list):
            yield from _texts(iter(value))


def test_a_lone_surrogate_is_counted_by_tiktoken(rs: bpe.Cl100kCounter) -> None:
    # rs_bpe takes UTF-8 only; a str decoded from JSON may hold "\ud800".
    text = "before \ud800 after"
    with pytest.raises(UnicodeEncodeError):
        text.encode("utf-8")
    assert rs.count(text) == len(ENCODE(text)) > 0


def test_the_choice_is_a_setting_and_each_choice_loads_its_counter(
        rs: bpe.Cl100kCounter) -> None:
    assert bpe.choose_counter("tiktoken").name == "tiktoken"
    assert bpe.cl100k_counter().releases_gil
    assert bpe.choose_counter("rs-bpe").name == "rs-bpe"
    assert not bpe.cl100k_counter().releases_gil
    assert bpe.choose_counter("auto").name == "rs-bpe"  # the wheel imports here
    with pytest.raises(ConfigurationError, match="unknown cl100k counter 'fast'"):
        bpe.choose_counter("fast")  # type: ignore[arg-type]


def test_without_the_wheel_auto_falls_back_and_rs_bpe_refuses_to_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rs_bpe", None)  # import rs_bpe raises ImportError
    monkeypatch.setitem(sys.modules, "rs_bpe.bpe", None)
    bpe.choose_counter("tiktoken")  # forget any loaded counter
    assert bpe.choose_counter("auto").name == "tiktoken"
    with pytest.raises(ConfigurationError, match="rs_bpe wheel does not import"):
        bpe.choose_counter("rs-bpe")
    assert TiktokenTokenizer(TokenCache()).count_text("two words") == 2


def test_a_counter_that_holds_the_gil_primes_on_the_jobs_own_thread(
        rs: bpe.Cl100kCounter, monkeypatch: pytest.MonkeyPatch) -> None:
    # Threads would only take turns: rs_bpe alone outruns tiktoken on two (worker.tokens.bpe).
    monkeypatch.setattr(counting_module, "PRIME_THREADS", 2)
    messages = [user(" ".join(f"word{i}x{j}." for j in range(60))) for i in range(40)]
    bpe.choose_counter("rs-bpe")
    monkeypatch.setattr(counting_module, "ThreadPoolExecutor",
                        lambda *a, **k: pytest.fail("handed to a pool"))
    tok = JobTokenizer(TiktokenTokenizer(TokenCache()))
    assert tok.prime(messages) > counting_module.PRIME_SERIAL_CHARS
    assert [tok.count(m) for m in messages] == [
        TiktokenTokenizer(TokenCache()).count(m) for m in messages]


def test_a_worker_loads_the_fastest_counter_at_start_up(
        rs: bpe.Cl100kCounter, caplog: pytest.LogCaptureFixture) -> None:
    from worker.service.composition import build_runtime
    from worker.settings import WorkerSettings

    bpe.choose_counter("tiktoken")  # another counter loaded before: the start-up replaces it
    settings = WorkerSettings(redis_url="redis://127.0.0.1:6379/15")
    with caplog.at_level("INFO", logger="worker.service"):
        build_runtime(settings).close()
    assert bpe.cl100k_counter().name == "rs-bpe"
    assert "cl100k counts by rs-bpe" in caplog.text
    assert "fact ledger looks facts up by aho-corasick" in caplog.text  # make install: fast


def test_rs_bpe_counts_from_many_threads(rs: bpe.Cl100kCounter) -> None:
    # A worker's jobs run on threads (COMPACTOR_POOL=threads): one counter object serves all.
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"text {i}: " + "some words, " * (i % 40 + 1) for i in range(800)]
    with ThreadPoolExecutor(8) as pool:
        counted = list(pool.map(rs.count, texts))
    assert counted == [len(ENCODE(t)) for t in texts]
