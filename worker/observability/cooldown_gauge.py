"""Models in cooldown, read from Redis at scrape time (``compactor_model_cooldown_seconds``).

A cooldown is shared by every worker (``worker.llm.cooldown``): the gauge reads the shared
keys, so any worker's scrape shows a candidate another worker cooled down. One gauge per
candidate of the chain (a bounded label): the seconds its cooldown has left, 0 when none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from worker.llm.cooldown import RedisCooldownStore

__all__ = ["CooldownCollector"]

log = logging.getLogger("worker.metrics")


class CooldownCollector:
    def __init__(self, store: RedisCooldownStore, candidates: dict[str, str]) -> None:
        self.store = store
        self.candidates = candidates  # cooldown key -> label (provider/model)

    def collect(self) -> Iterator[Any]:
        gauge = GaugeMetricFamily(
            "compactor_model_cooldown_seconds",
            "Seconds a model candidate stays cooled down for all workers (0: in use)",
            labels=["candidate"])
        try:
            left = self.store.remaining_s(list(self.candidates))
        except Exception as err:  # a scrape must answer; the broker gauge says Redis is down
            log.warning("cooldown gauge not read: %s", err)
            return
        for key, label in self.candidates.items():
            gauge.add_metric([label], left[key])
        yield gauge
