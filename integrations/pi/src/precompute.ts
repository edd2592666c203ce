/**
 * When to ask Compactor for a draft: inside the band just below pi's threshold, the rule of
 * Compactor's `should_precompute` (api_client/client/thresholds.py) with pi's own settings, so
 * the draft is ready when pi crosses the threshold and applying it costs one round trip.
 */

import { PI_DEFAULTS } from "./agent.ts";
import type { AgentSettings } from "./api.ts";

export interface Limits {
  contextWindow: number;
  reserveTokens: number;
  keepRecentTokens: number;
}

/** The limits of pi's effective settings (`agent`, model overrides applied) in `contextWindow`;
 * undefined when pi's compaction is off. */
export function limitsFor(agent: AgentSettings | undefined,
                          contextWindow: number): Limits | undefined {
  if (!agent) return undefined;
  return {
    contextWindow,
    reserveTokens: agent.reserveTokens ?? PI_DEFAULTS.reserveTokens,
    keepRecentTokens: agent.keepRecentTokens ?? PI_DEFAULTS.keepRecentTokens,
  };
}

/** Width of the band below `threshold`: clamp(0.125 × threshold, 8 192, 32 000) (oh-my-pi's). */
export function band(threshold: number): number {
  return Math.trunc(Math.max(8_192, Math.min(32_000, 0.125 * threshold)));
}

/**
 * Whether to ask for a draft now: `tokens` inside the band, and the context grew since the last
 * draft asked for (undefined: none yet), so one draft is asked after every turn in the band
 * (turn_end and agent_end of the same turn see the same tokens: one draft). A draft planned with
 * pi's cut is applied only on the state it was planned on (Compactor's validity rule,
 * docs/instant-compaction.md); each one extends the previous draft (only the span the turn moved
 * the cut by is summarised), so at the threshold the draft of the turn before, or of the same
 * state, is stored or in flight and the threshold job summarises one turn at most.
 */
export function precomputeDue(tokens: number, limits: Limits,
                              lastAsked: number | undefined): boolean {
  const threshold = limits.contextWindow - limits.reserveTokens;
  if (limits.contextWindow <= 0 || threshold <= 0) return false;
  if (tokens <= threshold - band(threshold) || tokens > threshold) return false;
  return lastAsked === undefined || tokens > lastAsked;
}
