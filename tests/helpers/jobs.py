"""Playing the worker in client tests: the worker's job store on a client's Redis."""

from __future__ import annotations

from api_client import CompactionClient
from worker.store.jobs import JobStore


def worker_jobs(client: CompactionClient) -> JobStore:
    """Leases, ``running``, progress events and finish, as a worker makes them."""
    return JobStore(client.redis, client.settings, client.layout)
