"""When ``observe`` starts a draft (docs/instant-compaction.md: drafts that land).

A draft is worth its tokens only if it is applied, so it must be ready before the threshold is
crossed and still fit then. ``observe`` therefore, in order:

1. far below the threshold (more than :func:`~api_client.client.thresholds.precompute_horizon`
   tokens): nothing, and no round trip;
2. otherwise one round trip (``observe.lua``) notes the agent's pace (the context's growth
   rate, in the session's ``pace`` key, shared by every client) and reports the stored draft
   and the speculative job in flight;
3. a draft that will still fit when the threshold is reached (checked with the growth still
   to come, ``threshold - context_tokens``) → nothing: it is ready (``draft_ready``);
4. a speculative job queued or running → nothing new: never two drafts computing at once;
5. inside the lead (:func:`~api_client.client.thresholds.precompute_lead`: the growth while
   a draft is computed at the measured rate, the oh-my-pi band as the floor) → a speculative
   job; a stale draft (kept but no longer fitting) is then extended by it, not redone.
"""

from __future__ import annotations

from dataclasses import dataclass

from api_client.client.draft_apply import DraftOutcome, check_call, check_reply
from api_client.client.thresholds import precompute_horizon, precompute_lead
from api_client.contract.agent_settings import AgentSettings
from api_client.contract.keys import INFLIGHT_SPECULATIVE, KeyLayout
from api_client.contract.redis_flows import Flow, Script
from api_client.contract.settings import ClientSettings

__all__ = ["Seen", "agent_view", "look", "near", "next_step"]


@dataclass(frozen=True, slots=True)
class Seen:
    """What observe.lua reported: the pace, the speculative job in flight, the draft."""

    rate: float                # context growth, tokens/s (0: not measured yet)
    draft_s: float | None      # how long the session's last draft took (None: not measured)
    inflight: str | None       # the speculative job queued or running
    draft: DraftOutcome        # valid | stale | discarded (cause; nodraft: none)


def agent_view(settings: ClientSettings, agent: AgentSettings | None) -> ClientSettings:
    """The settings the thresholds are judged with for a request: the agent's reserve when its
    settings name one (the agent compacts at ``window - its reserve``), else the client's."""
    if agent is None or agent.reserve_tokens is None:
        return settings
    return settings.model_copy(update={"reserve_tokens": agent.reserve_tokens})


def _threshold(context_window: int, settings: ClientSettings) -> int:
    return context_window - settings.reserve_tokens


def near(context_tokens: int, context_window: int, settings: ClientSettings) -> bool:
    """Close enough below the threshold that a draft may be due (steps 2-5 above)?"""
    if not (settings.compaction_enabled and settings.precompute_enabled):
        return False
    threshold = _threshold(context_window, settings)
    if context_window <= 0 or threshold <= 0:
        return False
    return threshold - precompute_horizon(threshold) < context_tokens <= threshold


def look(layout: KeyLayout, settings: ClientSettings, session_id: str, context_tokens: int,
         context_window: int, agent: AgentSettings | None = None) -> Flow[Seen]:
    """observe.lua: note the pace, report the draft (checked with the growth still to come
    before the threshold, and planned with ``agent``) and the speculative job in flight."""
    threshold = _threshold(context_window, settings)
    check = check_call(layout, settings, session_id, context_window,
                       ahead=threshold - context_tokens, agent=agent)
    s = layout.session(session_id)
    keys = [*check.keys, s.pace, s.inflight(INFLIGHT_SPECULATIVE)]
    args = [*check.args, str(context_tokens), str(settings.draft_ttl_s)]
    reply = [str(x) for x in (yield Script("observe", keys, args))]
    return Seen(rate=float(reply[0]), draft_s=float(reply[1]) if reply[1] else None,
                inflight=reply[2] or None, draft=check_reply(reply[3:]))


def next_step(seen: Seen, context_tokens: int, context_window: int,
              settings: ClientSettings) -> str:
    """``ready`` (a draft will fit), ``computing`` (one is in flight), ``start`` (inside the
    lead: a speculative job) or ``wait`` (not yet)."""
    if seen.draft.status == "valid":
        return "ready"
    if seen.inflight:
        return "computing"
    threshold = _threshold(context_window, settings)
    lead = precompute_lead(threshold, seen.rate, seen.draft_s, settings)
    return "start" if context_tokens > threshold - lead else "wait"
