"""``tenant quota`` and ``tenant show``: a tenant's quotas as an operator sets and reads them
(docs/tenants.md).

A tenant's quota hash (``KeyLayout.tenant_quota``, fields ``QUOTA_FIELDS``) overrides, for that
tenant, the settings of the same names (``COMPACTOR_STORED_BYTES_MAX``, ...); a field it lacks
is the setting's. ``show`` prints each quota's effective value and where it comes from, the bytes
the tenant's sessions hold now (:mod:`api_client.contract.stored_bytes`) and its queued jobs.
One ``name value`` line each, or ``--json``: one object.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from api_client.contract.errors import InvalidRequestError
from api_client.contract.keys import QUOTA_FIELDS, KeyLayout, check_tenant
from api_client.contract.redis_flows import Flow, Pipeline, SyncShell, cmd
from api_client.contract.stored_bytes import BYTES_TOTAL
from worker.cli.runtime_settings import load_settings

if TYPE_CHECKING:
    from worker.settings import WorkerSettings

__all__ = ["effective_quotas", "register"]

Number = int | float


def count(text: str) -> int:
    """A whole number >= 0 (0 = no limit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def amount(text: str) -> float:
    """A finite number >= 0 (0 = no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, not {text}")
    return value


def weight(text: str) -> float:
    """A finite number > 0 (the tenant's share of the fair order)."""
    value = amount(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


# option → (quota hash field, parser of its value, help)
OPTIONS: dict[str, tuple[str, Any, str]] = {
    "queued-jobs": ("queued_jobs_max", count, "jobs the tenant may have queued at once"),
    "stored-bytes": ("stored_bytes_max", count,
                     "bytes of entry lines the tenant's sessions may hold"),
    "tokens-per-day": ("tokens_per_day", count, "model tokens (input + output) per UTC day"),
    "usd-per-day": ("usd_per_day", amount, "model spend in USD per UTC day"),
    "weight": ("weight", weight, "the tenant's share of the fair order (more than 0)"),
    "max-running": ("max_running", count, "jobs of the tenant the fleet runs at once"),
}


def quota_field(text: str) -> str:
    """``--clear``'s FIELD: an option's name (``stored-bytes``) or the field's."""
    by_option = {name: field for name, (field, _, _) in OPTIONS.items()}
    field = by_option.get(text.removeprefix("--"), text)
    if field not in QUOTA_FIELDS:
        known = ", ".join(dict.fromkeys([*by_option, *QUOTA_FIELDS]))
        raise argparse.ArgumentTypeError(f"unknown quota {text!r}: one of {known}")
    return field


def _number(text: str) -> Number:
    value = float(text)
    return int(value) if value.is_integer() else value


def effective_quotas(overrides: Mapping[str, str],
                     settings: WorkerSettings) -> dict[str, dict[str, Number | None]]:
    """Each quota's value for the tenant: its override when set, else the setting's."""
    shown: dict[str, dict[str, Number | None]] = {}
    for field in QUOTA_FIELDS:
        default: Number = getattr(settings.client, field)
        override = _number(overrides[field]) if field in overrides else None
        shown[field] = {"effective": default if override is None else override,
                        "override": override, "default": default}
    return shown


def _read(layout: KeyLayout, tenant: str) -> Flow[tuple[dict[str, str], int, int]]:
    overrides, total, queued = yield Pipeline((
        cmd("hgetall", layout.tenant_quota(tenant)),
        cmd("hget", layout.tenant_bytes(tenant), BYTES_TOTAL),
        cmd("zcard", layout.tenant_queued(tenant))), transaction=False)
    return dict(overrides), int(total or 0), int(queued)


def _write(layout: KeyLayout, tenant: str, values: Mapping[str, Number],
           cleared: Sequence[str]) -> Flow[None]:
    key = layout.tenant_quota(tenant)
    writes = [cmd("hset", key, mapping={f: str(v) for f, v in values.items()})] if values else []
    if cleared:
        writes.append(cmd("hdel", key, *cleared))
    if writes:  # one key: one MULTI, on a Cluster too
        yield Pipeline(tuple(writes))


def _print(tenant: str, quotas: dict[str, dict[str, Number | None]], stored: int, queued: int,
           as_json: bool) -> None:
    if as_json:
        print(json.dumps({"tenant": tenant, "quotas": quotas, "storedBytes": stored,
                          "queuedJobs": queued}))
        return
    print(f"tenant {tenant}")
    for field, q in quotas.items():
        source = "default" if q["override"] is None else f"override; default {q['default']}"
        print(f"{field} {q['effective']} ({source})")
    print(f"stored_bytes {stored}")
    print(f"queued_jobs {queued}")


def _run(args: argparse.Namespace, values: Mapping[str, Number], cleared: Sequence[str]) -> int:
    from api_client.contract.redis_conn import make_redis

    tenant = check_tenant(args.tenant)
    settings = load_settings(args)
    layout = KeyLayout(settings.client.key_prefix, tenant)
    shell = SyncShell(make_redis(settings.client))
    try:
        shell.run(_write(layout, tenant, values, cleared))
        overrides, stored, queued = shell.run(_read(layout, tenant))
    finally:
        shell.redis.close()
    _print(tenant, effective_quotas(overrides, settings), stored, queued, args.json)
    return 0


def _quota(args: argparse.Namespace) -> int:
    values = {f: getattr(args, f) for f in QUOTA_FIELDS if getattr(args, f) is not None}
    cleared = list(dict.fromkeys(args.clear or ()))
    if both := [f for f in cleared if f in values]:
        raise InvalidRequestError(f"--clear {both[0]} and a value for it: give one of the two")
    return _run(args, values, cleared)


def _show(args: argparse.Namespace) -> int:
    return _run(args, {}, ())


def register(commands: Any) -> None:
    tenant = commands.add_parser("tenant", help="a tenant's quotas, stored bytes and queued jobs")
    sub = tenant.add_subparsers(dest="tenant_command", required=True, metavar="ACTION")
    quota = sub.add_parser(
        "quota", help="override quotas for one tenant (0 = no limit), then show them")
    show = sub.add_parser(
        "show", help="the tenant's effective quotas (override or default), the bytes its "
                     "sessions hold now and its queued jobs")
    for parser in (quota, show):
        parser.add_argument("tenant", metavar="TENANT", help="tenant name")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
    for name, (field, parse, text) in OPTIONS.items():
        metavar = "W" if name == "weight" else "X" if parse is amount else "N"
        quota.add_argument(f"--{name}", dest=field, type=parse, metavar=metavar, help=text)
    quota.add_argument("--clear", type=quota_field, action="append", metavar="FIELD",
                       help="drop an override (the setting applies again); repeatable")
    quota.set_defaults(handler=_quota)
    show.set_defaults(handler=_show)
