"""Playing the worker in client tests: the worker's job store on a client's Redis."""

from __future__ import annotations

from typing import Any

from api_client import CompactionClient
from worker.store.job_lifecycle import JobStore


def worker_jobs(client: CompactionClient) -> JobStore:
    """Leases, ``running``, progress events and finish, as a worker makes them."""
    return JobStore(client.redis, client.settings, client.layout)


class BothSides:
    """A job's two ends on one Redis: the client's enqueue and cancel, the worker's lifecycle."""

    def __init__(self, client: CompactionClient) -> None:
        self.client_side = client.jobs
        self.worker_side = worker_jobs(client)
        self.layout = client.layout
        self.settings = client.settings

    def __getattr__(self, name: str) -> Any:
        side = self.worker_side if hasattr(self.worker_side, name) else self.client_side
        return getattr(side, name)
