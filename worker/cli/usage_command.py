"""``usage``: the tenants' model spend per UTC day, drafts apart (docs/tenants.md), as each
tenant's client reads it (``client.usage(days)``). Without the global ``--tenant``: every tenant
that has spent model tokens (the workers name them in ``<p>:tenant-names``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from worker.cli.runtime_settings import load_settings

if TYPE_CHECKING:
    from api_client import DayUsage
    from worker.settings import WorkerSettings

__all__ = ["register"]

_HEADER = ("tenant", "day", "jobs", "input", "output", "usd", "drafts", "draft input",
           "draft output", "draft usd")


def _spent(day: DayUsage) -> bool:
    return bool(day.jobs or day.draft_jobs or day.spent_tokens or day.spent_usd)


def _row(day: DayUsage) -> tuple[str, ...]:
    return (day.tenant, day.day, str(day.jobs), str(day.input_tokens), str(day.output_tokens),
            f"{day.usd:.6f}", str(day.draft_jobs), str(day.draft_input_tokens),
            str(day.draft_output_tokens), f"{day.draft_usd:.6f}")


def _print_table(days: list[DayUsage], span: int) -> None:
    if not days:
        print(f"no model spend in the last {span} day(s)")
        return
    rows = [_HEADER, *(_row(day) for day in days)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    for row in rows:  # text left, numbers right
        print("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def _tenant_names(settings: WorkerSettings) -> list[str]:
    """Every tenant that spent model tokens; Redis down or refusing: the typed error (the CLI
    prints one line)."""
    import redis

    from api_client import CompactionClient
    from api_client.contract.redis_conn import REDIS_DOWN, refusal, unavailable

    with CompactionClient(settings.client) as operator:
        try:
            return sorted(operator.redis.smembers(operator.layout.tenants))
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        except redis.RedisError as err:
            typed = refusal(err)
            if typed is None:
                raise
            raise typed from err


def _usage(args: argparse.Namespace) -> int:
    from api_client import CompactionClient

    settings = load_settings(args)
    tenants = [args.tenant] if args.tenant else _tenant_names(settings)
    days: list[DayUsage] = []
    for tenant in tenants:
        with CompactionClient(settings.client, tenant=tenant) as client:
            days += [day for day in client.usage(args.days) if _spent(day)]
    if args.json:
        print(json.dumps({"days": args.days,
                          "usage": [day.model_dump(by_alias=True) for day in days]}))
    else:
        _print_table(days, args.days)
    return 0


def register(commands: Any) -> None:
    # ``--tenant T`` (this tenant only) is the global option: the command's own would clash
    # with it (a subcommand's default overwrites the global value).
    usage = commands.add_parser(
        "usage", help="model tokens and USD per tenant and UTC day, speculative drafts apart "
                      "(days without spend are left out); the global --tenant T: that tenant "
                      "only, else every tenant that spent model tokens")
    usage.add_argument("--days", type=int, default=7, metavar="N",
                       help="the last N UTC days, today included (default 7, at most 400)")
    usage.add_argument("--json", action="store_true",
                       help="print one JSON object: days and usage (one object per tenant and "
                            "day, today first)")
    usage.set_defaults(handler=_usage)
