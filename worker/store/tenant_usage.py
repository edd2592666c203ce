"""A tenant's model spend as the worker keeps it (the contract's flows,
:mod:`api_client.contract.usage`): a job's tokens and USD added when it ends, today's spend and
the tenant's quota overrides read before a model call, and the tokens reserved by the model
calls under way (the tenant's reservations, api_client/contract/reservations.py:
:meth:`TenantUsageStore.reserve`)."""

from __future__ import annotations

import time
from typing import Any

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Command, Flow, Script, SyncShell
from api_client.contract.reservations import RESERVED_KEY_TTL_S
from api_client.contract.usage import DayUsage, SpendAdd, add_spend, read_budget, utc_day

__all__ = ["TenantUsageStore"]

# How long a tenant this process named in the tenants set (``compactor usage`` lists it) is
# not named again, and a day's hash it gave its TTL (USAGE_TTL_S, 400 days) is not given it
# again: the set only grows and a day's hash is written for a day, so once an hour is enough
# (a flushed or deleted key gets it back within the hour).
NAMED_FOR_S = 3600.0


class TenantUsageStore:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout) -> None:
        self.layout = layout
        self._io = SyncShell(client)
        self._named: dict[str, float] = {}  # tenant, or "tenant day" -> until when it is done

    def add(self, tenant: str, at: float, *, input_tokens: int, output_tokens: int, usd: float,
            draft: bool, ended: bool, release_job: str | None = None) -> None:
        """Count one delivery's spend on the UTC day of ``at`` (``ended``: and the job);
        ``release_job``: and give back what that job holds, in the same MULTI."""
        now, day = time.monotonic(), utc_day(at)
        name = self._named.get(tenant, 0.0) <= now
        keep = self._named.get(f"{tenant} {day}", 0.0) <= now
        self._io.run(add_spend(self.layout, tenant, day, input_tokens=input_tokens,
                               output_tokens=output_tokens, usd=usd, draft=draft,
                               jobs=int(ended), name_tenant=name, keep_day=keep,
                               release_job=release_job))
        self._mark(tenant, day, name, keep)

    def spend_add(self, tenant: str, at: float, *, input_tokens: int, output_tokens: int,
                  usd: float, draft: bool, ended: bool) -> SpendAdd:
        """What :meth:`add` would count, for the job's end to count in its own step
        (``JobStore.finish``'s ``spend``); :meth:`counted` once it did."""
        now, day = time.monotonic(), utc_day(at)
        return SpendAdd(tenant, day, input_tokens, output_tokens, usd, draft, int(ended),
                        name_tenant=self._named.get(tenant, 0.0) <= now,
                        keep_day=self._named.get(f"{tenant} {day}", 0.0) <= now)

    def counted(self, add: SpendAdd) -> None:
        """``add`` was counted: the tenant named and the day kept, for the hour."""
        self._mark(add.tenant, add.day, add.name_tenant, add.keep_day)

    def _mark(self, tenant: str, day: str, name: bool, keep: bool) -> None:
        now = time.monotonic()
        if name:
            self._named[tenant] = now + NAMED_FOR_S
        if keep:
            if len(self._named) > 4096:  # days gone by: forget what ran out
                self._named = {k: t for k, t in self._named.items() if t > now}
            self._named[f"{tenant} {day}"] = now + NAMED_FOR_S

    def reserve(self, tenant: str, day: str, tokens: int, default_limit: int,
                share: float = 1.0, *, job_id: str, owner: str,
                until: float) -> tuple[bool, int, int, float]:
        """Reserve ``tokens`` of the tenant's ``tokens_per_day`` on ``day`` for ``job_id``'s
        delivery ``owner`` until ``until`` (Unix s) unless that would take spent + reserved
        past it: (reserved?, spent, reserved before, limit)."""
        keys = (self.layout.tenant_usage(tenant, day), self.layout.tenant_quota(tenant),
                self.layout.tenant_reserved(tenant))
        args = (tokens, default_limit, share, job_id, owner, int(time.time() * 1000),
                int(until * 1000), RESERVED_KEY_TTL_S)
        done, spent, held, limit = self._io.run(_one(Script(
            "reserve_tokens", keys, [str(a) for a in args])))
        return bool(done), int(spent), int(held), float(limit)

    def release(self, tenant: str, job_id: str, owner: str = "") -> None:
        """Give back what the job holds (``owner``: only when that delivery holds it; its
        real spend is counted by :meth:`add`)."""
        self._io.run(_one(Script("release_tokens", [self.layout.tenant_reserved(tenant)],
                                 [job_id, owner])))

    def today(self, tenant: str, at: float) -> tuple[DayUsage, dict[str, str]]:
        """The tenant's spend on the UTC day of ``at``, and its quota overrides."""
        return self._io.run(read_budget(self.layout, tenant, utc_day(at)))


def _one(command: Command | Script) -> Flow[Any]:
    return (yield command)
