"""The model budget a job holds from its admission to its end (docs/tenants.md, "Quotas").

Admission (``lua/_admit.lua``: the enqueue script, ``admit.lua``, the inbox admitter) reserves
an estimate of what the new job will spend in the tenant's ``reserved`` hash
(``KeyLayout.tenant_reserved``: job id → ``<tokens> <until Unix ms> <owner>``), in the step
that checks the budget against the day's spend plus every reservation held: a summary its
prompt's characters / 4 plus its output budget, refused when that does not fit; a compaction or
a branch summary its session's stored bytes / 4 (the session's field of the tenant's
stored-bytes count, read in that step: nothing of the session is walked), at most the request's
window, plus a summary's output budget, or :data:`COMPACTION_ESTIMATE_TOKENS` when the count
does not know the session (admitted while any budget is left: its worker checks each call); a
prune nothing. The owner of an admission's reservation is ``-``.

While the job runs, its worker's model calls replace it (``worker/store/tenant_usage.py``):
the job's field then holds what that delivery's calls reserved, owned by the delivery, so that
nothing is counted twice and a retried run replaces what a dead one held. The job's end gives
it back (:func:`release`: the worker's end of a delivery, a client's or the sweep's end of a
queued job). A field whose time is up counts for nothing and is dropped by the next
reservation: an admission's after ``job_pending_ttl_s``, a delivery's after the job's
deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api_client.contract.errors import PromptTooLargeError, QuotaExceededError
from api_client.contract.job_enums import JobKind
from api_client.contract.keys import KeyLayout, tenant_of_job
from api_client.contract.redis_flows import Command, cmd

__all__ = ["CALL_OUTPUT_CAP", "COMPACTION_ESTIMATE_TOKENS", "COMPACTION_WINDOW_DEFAULT",
           "RESERVED_KEY_TTL_S", "SUMMARY_OUTPUT_DEFAULT", "Estimate", "admission_estimate",
           "refusal", "refusal_result", "release"]

# A compaction's or branch summary's reservation until its worker's calls replace it, when its
# tenant's stored-bytes count does not know the session (an inbox tenant's): a flat figure, the
# order of one summary's output.
COMPACTION_ESTIMATE_TOKENS = 2_048
# The window a compaction's span is capped at when its request names none (the workers'
# COMPACTOR_CONTEXT_WINDOW default).
COMPACTION_WINDOW_DEFAULT = 128_000
# The output budget of a call when the request names none (a history summary's), and the most
# any call is given (the router's default max_output_tokens).
SUMMARY_OUTPUT_DEFAULT = 13_107
CALL_OUTPUT_CAP = 32_768
# The hash lives past any field's time (a day of a job's deadline and more).
RESERVED_KEY_TTL_S = 2 * 86_400


def call_estimate(chars: int, max_tokens: int | None) -> int:
    """A call's tokens at most, about: 4 characters a token, plus its output budget."""
    return -(-chars // 4) + min(max_tokens or SUMMARY_OUTPUT_DEFAULT, CALL_OUTPUT_CAP)


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a new job reserves at admission: ``tokens``, unless ``span_cap`` is set: then
    (in ``_admit.lua``, the session's field of its tenant's stored-bytes count read in the
    same step) its stored bytes / 4, at most ``span_cap``, plus ``output``; ``tokens`` when the
    count does not know the session. ``fit``: refused unless it fits in what is left."""

    tokens: int
    fit: bool
    span_cap: int = 0
    output: int = 0


def admission_estimate(kind: JobKind, summary_input: Mapping[str, Any] | None,
                       context_window: int | None = None) -> Estimate:
    """The estimate a new job of ``kind`` reserves (docs/tenants.md "Quotas"): a summary its
    prompts' characters / 4 plus its output budget; a compaction or branch summary the span
    its session holds (at most the request's window, else :data:`COMPACTION_WINDOW_DEFAULT`)
    plus a summary's output budget; a prune nothing."""
    if kind is JobKind.PRUNE:
        return Estimate(0, False)
    if kind is not JobKind.SUMMARIZE:
        return Estimate(COMPACTION_ESTIMATE_TOKENS, False,
                        span_cap=context_window or COMPACTION_WINDOW_DEFAULT,
                        output=SUMMARY_OUTPUT_DEFAULT)
    data = summary_input or {}
    chars = sum(len(v) for v in (data.get("systemPrompt"), data.get("prompt"))
                if isinstance(v, str))
    tokens = data.get("maxTokens")
    return Estimate(call_estimate(chars, tokens if isinstance(tokens, int) else None), True)


def release(layout: KeyLayout, job_id: str) -> Command:
    """The job's reservation given back (it ended, or was never created)."""
    return cmd("hdel", layout.tenant_reserved(tenant_of_job(job_id)), job_id)


def refusal_result(err: QuotaExceededError | PromptTooLargeError) -> dict[str, Any]:
    """A job's ``result`` when its worker refused it over a quota (the model budget) or a
    prompt over the model's window: what a waiting caller needs to answer as admission does
    (:func:`refusal`)."""
    if isinstance(err, PromptTooLargeError):
        return {"promptTooLarge": {"setting": err.setting, "limit": err.limit,
                                   "value": err.value}}
    return {"quotaExceeded": {"tenant": err.tenant, "quota": err.quota, "limit": err.limit,
                              "value": err.value, "resetsAt": err.resets_at}}


def refusal(result: Mapping[str, Any] | None
            ) -> QuotaExceededError | PromptTooLargeError | None:
    """The error a failed job's ``result`` records its worker refused it with, if any."""
    found = (result or {}).get("quotaExceeded")
    too_large = (result or {}).get("promptTooLarge")
    try:
        if isinstance(too_large, dict):
            return PromptTooLargeError("the summary's prompt", setting=str(too_large["setting"]),
                                       limit=int(too_large["limit"]),
                                       value=int(too_large["value"]))
        if not isinstance(found, dict):
            return None
        return QuotaExceededError(str(found["tenant"]), quota=str(found["quota"]),
                                  limit=_number(found["limit"]), value=_number(found["value"]),
                                  resets_at=found.get("resetsAt"))
    except (KeyError, TypeError, ValueError):
        return None


def _number(value: Any) -> float:
    number = float(value)
    return int(number) if number.is_integer() else number
