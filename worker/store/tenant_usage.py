"""A tenant's model spend as the worker keeps it (the contract's flows,
:mod:`api_client.contract.usage`): a job's tokens and USD added when it ends, today's spend and
the tenant's quota overrides read before a model call."""

from __future__ import annotations

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import SyncShell
from api_client.contract.usage import DayUsage, add_spend, read_budget, utc_day

__all__ = ["TenantUsageStore"]


class TenantUsageStore:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout) -> None:
        self.layout = layout
        self._io = SyncShell(client)

    def add(self, tenant: str, at: float, *, input_tokens: int, output_tokens: int, usd: float,
            draft: bool, ended: bool) -> None:
        """Count one delivery's spend on the UTC day of ``at`` (``ended``: and the job)."""
        self._io.run(add_spend(self.layout, tenant, utc_day(at), input_tokens=input_tokens,
                               output_tokens=output_tokens, usd=usd, draft=draft,
                               jobs=int(ended)))

    def today(self, tenant: str, at: float) -> tuple[DayUsage, dict[str, str]]:
        """The tenant's spend on the UTC day of ``at``, and its quota overrides."""
        return self._io.run(read_budget(self.layout, tenant, utc_day(at)))
