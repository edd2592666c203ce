"""The Celery app class: it carries the worker's settings and one job runtime per process."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery

from worker.llm import Summarizer
from worker.service import Runtime, build_runtime
from worker.settings import WorkerSettings

__all__ = ["CompactorCelery"]


class CompactorCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries its settings and one job runtime per worker process."""

    def __init__(self, settings: WorkerSettings,
                 summarizer: Callable[[], Summarizer] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.compactor_settings = settings
        self.summarizer = summarizer  # replaces the model router (tests, the demo)
        self._runtime: tuple[int, Runtime] | None = None
        self._runtime_lock = threading.Lock()

    def runtime(self) -> Runtime:
        """This process's runtime; a prefork child builds its own after the fork."""
        current = self._runtime
        if current is not None and current[0] == os.getpid():
            return current[1]
        with self._runtime_lock:
            if self._runtime is None or self._runtime[0] != os.getpid():
                rt = build_runtime(self.compactor_settings, summarizer=self.summarizer)
                self._runtime = (os.getpid(), rt)
            return self._runtime[1]

    def close_runtime(self) -> None:
        with self._runtime_lock:
            if self._runtime is not None and self._runtime[0] == os.getpid():
                self._runtime[1].close()
            self._runtime = None
