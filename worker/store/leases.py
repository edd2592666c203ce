"""Job leases: which worker runs a job right now (``<record>:lease``, a ``PX`` key).

A delivery first takes the lease (:meth:`Leases.acquire`): ``ACQUIRED`` (go on), ``HELD``
(another worker's lease is live: drop this delivery) or ``FINISHED`` (a duplicate delivery: ack
and return). While it works a heartbeat renews it; a worker that stalled past its TTL finds it
taken and stops. ``finish`` (api_client's finish.lua) drops it with the terminal state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import partial
from typing import Any, NoReturn, TypeVar, cast

import redis

from api_client.contract.errors import JobNotFoundError
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import register
from api_client.contract.redis_flows import replied

__all__ = ["LeaseOutcome", "Leases", "guarded"]

T = TypeVar("T")


class LeaseOutcome(StrEnum):
    ACQUIRED = "acquired"
    HELD = "held"          # another worker holds a live lease
    FINISHED = "finished"  # the job already ended (a duplicate delivery)


def guarded(job_id: str, fn: Callable[[], T]) -> T:
    """Run one Redis call of a job, its errors mapped as every flow's are
    (:func:`~api_client.contract.redis_flows.replied`: a dead server → BrokerUnavailableError,
    a full one → StorageFullError, refused credentials or a read-only replica → their typed
    errors), and a vanished record (``COMPACTOR_NOJOB``) → JobNotFoundError."""
    try:
        return fn()
    except Exception as err:
        return cast(T, replied(err, partial(_vanished, job_id)))


def _vanished(job_id: str, err: redis.ResponseError) -> NoReturn:
    if str(err).startswith("COMPACTOR_NOJOB"):
        raise JobNotFoundError(job_id) from err
    raise err


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))


class Leases:
    """Acquire, renew and release job leases (lease_acquire/renew/release.lua)."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout) -> None:
        self.layout = layout
        self._client = client
        self._acquire = register(client, "lease_acquire")
        self._renew = register(client, "lease_renew")
        self._release = register(client, "lease_release")

    def acquire(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome:
        jk = self.layout.job(job_id)
        reply = self._run(self._acquire, job_id, [jk.record, jk.lease], [worker_id, _ms(ttl_s)])
        return LeaseOutcome(reply)

    def renew(self, job_id: str, worker_id: str, ttl_s: float) -> bool:
        keys = [self.layout.job(job_id).lease]
        return bool(self._run(self._renew, job_id, keys, [worker_id, _ms(ttl_s)]))

    def holder(self, job_id: str) -> str | None:
        lease = self.layout.job(job_id).lease
        return guarded(job_id, lambda: self._client.get(lease))

    def release(self, job_id: str, worker_id: str) -> bool:
        return bool(self._run(self._release, job_id, [self.layout.job(job_id).lease], [worker_id]))

    @staticmethod
    def _run(script: Any, job_id: str, keys: Sequence[str], args: Sequence[str]) -> Any:
        return guarded(job_id, lambda: script(keys=list(keys), args=list(args)))
