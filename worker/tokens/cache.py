"""The token cache: counts of texts, keyed by a digest of their content.

A worker builds one (``worker.service.composition``) for its tokenizer, which serves every job
of the process and both layers (the planner's message counts and the model layer's prompt
counts), so a session that grew since the last plan costs only its new text: equal text in a
fresh snapshot has the same key. The digests are also what workers share through Redis
(``worker.store.token_counts``).

Bounded: at most ``max_entries`` counts, least recently used evicted first. A key is a 16-byte
BLAKE2b digest, not the text itself, so memory does not grow with the size of the texts: an
entry costs about 200 bytes (digest, count, the LRU's links), :data:`DEFAULT_ENTRIES` (a
worker's) about 20 MB. Thread-safe: writes take one lock, hits none (see
``worker.tokens.memo``); the hit and miss tallies may lose an increment under threads.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

__all__ = ["DEFAULT_ENTRIES", "TokenCache", "content_key"]

DEFAULT_ENTRIES = 100_000


def content_key(text: str) -> bytes:
    """A 16-byte digest of ``text`` (lone surrogates allowed: session JSON may carry them)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class TokenCache:
    """An LRU map from a text's digest to its token count."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max(0, max_entries)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, text: str, counter: Callable[[str], int]) -> int:
        """The cached count of ``text``, else ``counter(text)`` (outside the lock), remembered."""
        key = content_key(text)
        known = self._counts.get(key)  # a hit takes no lock, as in worker.tokens.memo.IdentityMemo
        if known is not None:
            try:  # noqa: SIM105  (as in worker.tokens.memo: a hit per text of a job)
                self._counts.move_to_end(key)
            except KeyError:  # evicted by another thread just now
                pass
            self.hits += 1
            return known
        self.misses += 1
        counted = counter(text)
        with self._lock:
            self._counts[key] = counted
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)
        return counted

    def unknown(self, keyed: Iterable[tuple[bytes, str]]) -> dict[bytes, str]:
        """The texts without a count, by key, of (key, text) pairs (no hit or miss is
        recorded). The digests (and whatever produces the texts) are computed before the lock
        is taken: the other jobs' lookups do not wait for a cold session's whole text."""
        pairs = dict(keyed)
        with self._lock:
            return {key: text for key, text in pairs.items() if key not in self._counts}

    def known(self, keys: Iterable[bytes]) -> list[int] | None:
        """The counts of ``keys``, or None when one of them is not (or no longer) cached."""
        counts = self._counts
        found = [counts.get(key) for key in keys]
        return None if None in found else found  # type: ignore[return-value]

    def put_many(self, counts: Iterable[tuple[bytes, int]]) -> None:
        with self._lock:
            for key, counted in counts:
                self._counts[key] = counted
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)
