"""A tenant's model spend as the worker keeps it (the contract's flows,
:mod:`api_client.contract.usage`): a job's tokens and USD added when it ends, today's spend and
the tenant's quota overrides read before a model call, and the tokens reserved by the model
calls under way (``reserved_tokens`` of the day's hash: :meth:`TenantUsageStore.reserve`)."""

from __future__ import annotations

from typing import Any

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Command, Flow, SyncShell, cmd
from api_client.contract.usage import USAGE_TTL_S, DayUsage, add_spend, read_budget, utc_day

__all__ = ["RESERVED_FIELD", "TenantUsageStore"]

RESERVED_FIELD = "reserved_tokens"
# KEYS: the day's usage hash, the tenant's quota hash. ARGV: tokens wanted, the default
# tokens_per_day, the share of it this job may reach (drafts: draft_budget_share), the hash's
# TTL. Reserves when spent + reserved + wanted stays within the limit (0: none), in one step, so
# that calls of parallel jobs cannot together pass it. Returns {1|0, spent, reserved, limit}.
_RESERVE = """
local limit = tonumber(redis.call('HGET', KEYS[2], 'tokens_per_day') or '') or tonumber(ARGV[2])
limit = limit * tonumber(ARGV[3])
local u = redis.call('HMGET', KEYS[1], 'input_tokens', 'output_tokens', 'draft_input_tokens',
                     'draft_output_tokens', 'reserved_tokens')
local spent = 0
for i = 1, 4 do spent = spent + (tonumber(u[i]) or 0) end
local reserved = tonumber(u[5]) or 0
local wanted = tonumber(ARGV[1])
if limit > 0 and spent + reserved + wanted > limit then
  return {0, spent, reserved, tostring(limit)}
end
redis.call('HINCRBY', KEYS[1], 'reserved_tokens', wanted)
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {1, spent, reserved, tostring(limit)}
"""


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

    def reserve(self, tenant: str, day: str, tokens: int, default_limit: int,
                share: float = 1.0) -> tuple[bool, int, int, float]:
        """Reserve ``tokens`` of the tenant's ``tokens_per_day`` on ``day`` unless that would
        take spent + reserved past it: (reserved?, spent, reserved before, limit)."""
        key, quota = self.layout.tenant_usage(tenant, day), self.layout.tenant_quota(tenant)
        done, spent, held, limit = self._io.run(_one(cmd(
            "execute_command", "EVAL", _RESERVE, 2, key, quota, tokens, default_limit, share,
            USAGE_TTL_S)))
        return bool(done), int(spent), int(held), float(limit)

    def release(self, tenant: str, day: str, tokens: int) -> None:
        """Give back what :meth:`reserve` took (the spend itself is counted by :meth:`add`)."""
        if tokens:
            self._io.run(_one(cmd("hincrby", self.layout.tenant_usage(tenant, day),
                                  RESERVED_FIELD, -tokens)))

    def today(self, tenant: str, at: float) -> tuple[DayUsage, dict[str, str]]:
        """The tenant's spend on the UTC day of ``at``, and its quota overrides."""
        return self._io.run(read_budget(self.layout, tenant, utc_day(at)))


def _one(command: Command) -> Flow[Any]:
    return (yield command)
