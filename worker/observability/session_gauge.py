"""Stored sessions and their bytes, sampled from Redis at scrape time
(``compactor_sessions_stored``, ``compactor_session_bytes``): what fills Redis, and whether
retention keeps up.

Both are estimates, bounded per scrape. A scrape goes on with a ``SCAN`` walk of the session
header keys of every tenant (``MATCH <p>:*session:{*}:header``) for at most
:data:`SCANS_PER_SCRAPE` pages of ``COUNT`` :data:`SCAN_COUNT`, and measures at most
:data:`MEASURED_PER_SCRAPE` of the sessions it found (a random sample) with ``MEMORY USAGE`` of
each of their keys (job records aside). When the walk ends (its cursor back at 0) the pass's
figures are published: the sessions it found (SCAN may count one twice while Redis resizes its
table) and their measured mean × that count. A database that fits in one scrape's walk is
counted afresh at every scrape; a larger one over several (a million keys: about 50 scrapes).
Until the first walk ends, the figures so far.
Every worker reports the same values: aggregate with ``max``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from api_client.contract.keys import KeyLayout

__all__ = ["SessionGaugeCollector"]

log = logging.getLogger("worker.metrics")

SCAN_COUNT = 1_000  # keys a SCAN page looks at: well under a millisecond of Redis
SCANS_PER_SCRAPE = 20
MEASURED_PER_SCRAPE = 100  # sessions measured per scrape: ~20 MEMORY USAGE each, one pipeline


@dataclass(slots=True)
class _Pass:
    sessions: int = 0
    measured: int = 0
    measured_bytes: int = 0

    @property
    def bytes(self) -> float:
        return self.measured_bytes / self.measured * self.sessions if self.measured else 0.0


class SessionGaugeCollector:
    """A prometheus_client collector over the sessions' Redis (a client of its own, with short
    timeouts: a scrape must answer)."""

    def __init__(self, client: Any, layout: KeyLayout, *, scan_count: int = SCAN_COUNT,
                 scans: int = SCANS_PER_SCRAPE, measured: int = MEASURED_PER_SCRAPE) -> None:
        self.redis = client
        self.layout = layout
        self.scan_count, self.scans, self.measured = scan_count, scans, measured
        self._lock = threading.Lock()  # two scrapes at once go on with one walk, in turn
        self._cursor = 0
        self._pass = _Pass()
        self._last: _Pass | None = None

    def sample(self) -> tuple[int, float]:
        """(sessions, bytes): the last complete walk's figures, else the current walk's."""
        with self._lock:
            found: list[str] = []
            for _ in range(self.scans):
                cursor, keys = self.redis.scan(self._cursor, match=self.layout.headers_match(),
                                               count=self.scan_count)
                self._cursor = int(cursor)
                found += [sid for sid in map(self._session_of, keys) if sid is not None]
                if self._cursor == 0:
                    break
            self._pass.sessions += len(found)
            chosen = found if len(found) <= self.measured else random.sample(found,
                                                                              self.measured)
            self._pass.measured += len(chosen)
            self._pass.measured_bytes += self._bytes(chosen)
            if self._cursor == 0:
                self._last, self._pass = self._pass, _Pass()
            shown = self._last or self._pass
            return shown.sessions, shown.bytes

    def _session_of(self, key: str | bytes) -> str | None:
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        return self.layout.session_of_header(text)

    def _bytes(self, session_ids: Sequence[str]) -> int:
        if not session_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for sid in session_ids:
            for key in self.layout.session(sid).all():
                pipe.memory_usage(key)
        return sum(int(size or 0) for size in pipe.execute())  # None: the key is absent

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            sessions, size = self.sample()
        except Exception as err:  # a scrape must answer; compactor_broker_up tells of Redis
            log.warning("stored sessions not sampled: %s: %s", type(err).__name__, err)
            return
        stored = GaugeMetricFamily(
            "compactor_sessions_stored",
            "Sessions stored in Redis (a SCAN walk of the header keys, over scrapes)")
        stored.add_metric([], sessions)
        size_gauge = GaugeMetricFamily(
            "compactor_session_bytes",
            "Bytes the stored sessions take in Redis, estimated: MEMORY USAGE of a sample of "
            "sessions (job records aside) x the sessions stored")
        size_gauge.add_metric([], size)
        yield stored
        yield size_gauge
