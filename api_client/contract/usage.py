"""A tenant's model spend per UTC day (docs/tenants.md).

The worker adds what a job's model calls cost when the job ends (:func:`add_spend`); the client,
``compactor usage`` and ``GET /v1/usage`` read the days back (:func:`read_usage`); before a
model call the worker reads today's spend and the tenant's quota overrides
(:func:`read_budget`). One hash per tenant and day (``KeyLayout.tenant_usage``, fields
``USAGE_FIELDS``), speculative drafts counted apart (``draft_*``) so that what speculation costs
stays visible. Input tokens are all the model read: uncached, cache reads and cache writes.

The tenant's keys are in no session's Cluster slot: the writes go in one pipeline of their own,
never inside a session script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from api_client.contract.errors import InvalidRequestError
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import eval_args
from api_client.contract.redis_flows import Command, Flow, Pipeline, cmd

__all__ = ["MAX_USAGE_DAYS", "USAGE_TTL_S", "DayUsage", "SpendAdd", "add_spend", "last_days",
           "next_day_start", "read_budget", "read_usage", "spend_script_part", "utc_day"]

# A year of days to bill and compare with, and a month of slack: then a day's hash expires.
USAGE_TTL_S = 400 * 86_400
MAX_USAGE_DAYS = 400  # what a read may ask for: no more days are kept


class DayUsage(BaseModel):
    """One tenant's model spend on one UTC day: applied work (every job but speculative
    drafts) and drafts apart."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    tenant: str
    day: str  # YYYY-MM-DD, UTC
    jobs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    draft_jobs: int = 0
    draft_input_tokens: int = 0
    draft_output_tokens: int = 0
    draft_usd: float = 0.0

    @property
    def spent_tokens(self) -> int:
        """Every token of the day, drafts included (what the model budget counts)."""
        return (self.input_tokens + self.output_tokens + self.draft_input_tokens
                + self.draft_output_tokens)

    @property
    def spent_usd(self) -> float:
        return self.usd + self.draft_usd

    @classmethod
    def from_redis(cls, tenant: str, day: str, fields: Mapping[str, str]) -> DayUsage:
        # Only the known fields: a hash written by a later version may hold more.
        known = {k: v for k, v in fields.items() if k in cls.model_fields}
        return cls.model_validate({**known, "tenant": tenant, "day": day})


def utc_day(at: float) -> str:
    """The UTC day (``YYYY-MM-DD``) of the epoch time ``at``: a usage hash's name."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def next_day_start(at: float) -> str:
    """When the day of ``at`` ends (ISO 8601, UTC): a per-day quota's reset."""
    day = datetime.fromtimestamp(at, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day + timedelta(days=1)).isoformat().replace("+00:00", "Z")


def last_days(at: float, days: int) -> list[str]:
    """The ``days`` UTC days up to the day of ``at``, newest first."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_USAGE_DAYS:
        raise InvalidRequestError(f"days must be 1-{MAX_USAGE_DAYS}, not {days!r}")
    return [utc_day(at - n * 86_400) for n in range(days)]


def read_usage(layout: KeyLayout, tenant: str, days: Sequence[str]) -> Flow[list[DayUsage]]:
    """The tenant's usage on each of ``days`` (zeros for a day without spend): one round
    trip of HGETALLs."""
    calls = tuple(cmd("hgetall", layout.tenant_usage(tenant, day)) for day in days)
    replies = yield Pipeline(calls, transaction=False)
    return [DayUsage.from_redis(tenant, day, fields or {})
            for day, fields in zip(days, replies, strict=True)]


def read_budget(layout: KeyLayout, tenant: str,
                day: str) -> Flow[tuple[DayUsage, dict[str, str]]]:
    """The tenant's spend on ``day`` and its quota overrides (``QUOTA_FIELDS``; absent: the
    settings'), in one round trip."""
    usage, quota = yield Pipeline((cmd("hgetall", layout.tenant_usage(tenant, day)),
                                   cmd("hgetall", layout.tenant_quota(tenant))),
                                  transaction=False)
    return DayUsage.from_redis(tenant, day, usage or {}), dict(quota or {})


@dataclass(frozen=True, slots=True)
class SpendAdd:
    """One delivery's spend on its tenant's day, as :func:`add_spend` counts it, for a writer
    that counts it in a step of its own: the worker's end of a job on one Redis
    (``lua/end_job.lua``, :func:`spend_script_part`)."""

    tenant: str
    day: str
    input_tokens: int
    output_tokens: int
    usd: float
    draft: bool
    jobs: int
    name_tenant: bool = True
    keep_day: bool = True


def spend_script_part(layout: KeyLayout, add: SpendAdd | None) -> tuple[list[str], list[str]]:
    """``end_job.lua``'s KEYS 12-13 and ARGV 2-8 for ``add`` (None: nothing to count): the
    writes of :func:`add_spend`, made inside the script."""
    if add is None:
        return [], ["", "0", "0", "0", "0", "0", ""]
    keys = [layout.tenant_usage(add.tenant, add.day), layout.tenants]
    return keys, ["draft_" if add.draft else "", str(add.jobs), str(add.input_tokens),
                  str(add.output_tokens), repr(float(add.usd)) if add.usd else "0",
                  str(USAGE_TTL_S) if add.keep_day else "0",
                  add.tenant if add.name_tenant else ""]


def add_spend(layout: KeyLayout, tenant: str, day: str, *, input_tokens: int,
              output_tokens: int, usd: float, draft: bool, jobs: int,
              name_tenant: bool = True, keep_day: bool = True,
              release_job: str | None = None) -> Flow[None]:
    """Add one job's spend to the tenant's day (``draft``: to the ``draft_*`` fields), keep
    the day ``USAGE_TTL_S`` (``keep_day``) and name the tenant in ``layout.tenants``
    (``name_tenant``): a caller that did either lately may leave it out. A sum of 0 USD adds
    nothing (a missing field reads as 0).

    ``release_job``: give back what that job holds of the budget (``release_tokens.lua``) in
    one MULTI with its spend (the usage hash and the reservations share the tenant's slot):
    counted and given back at once, never both (an admission in between would see the job's
    tokens twice and refuse a job that fits) and never neither. The tenants' set is in another
    Cluster slot: then it follows, apart."""
    key, pre = layout.tenant_usage(tenant, day), "draft_" if draft else ""
    calls: list[Command] = [cmd("hincrby", key, f"{pre}jobs", jobs)] if jobs else []
    calls += [cmd("hincrby", key, f"{pre}input_tokens", input_tokens),
              cmd("hincrby", key, f"{pre}output_tokens", output_tokens)]
    if usd:
        calls.append(cmd("hincrbyfloat", key, f"{pre}usd", usd))
    if keep_day:
        calls.append(cmd("expire", key, USAGE_TTL_S))
    if release_job is not None:
        calls.append(cmd("execute_command", *eval_args(
            "release_tokens", [layout.tenant_reserved(tenant)], [release_job, ""])))
        yield Pipeline(tuple(calls), transaction=True)
        if name_tenant:
            yield cmd("sadd", layout.tenants, tenant)
        return
    if name_tenant:
        calls.append(cmd("sadd", layout.tenants, tenant))
    yield Pipeline(tuple(calls), transaction=False)
