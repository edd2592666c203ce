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
 * Whether to ask for a draft now: `tokens` inside the band, and no draft asked for yet, or the
 * last one may not last until the threshold. How long a draft stays valid is Compactor's rule
 * (README "Instant compaction": the context after applying it must fit under the threshold);
 * this side assumes the stricter bound of the kept tail (0.8 of it: Compactor weighs stored
 * JSON, a little more than pi's tokens), so at most one more draft is asked for, once the
 * context grew by half the kept tail, and a valid draft is there when pi crosses the threshold.
 */
export function precomputeDue(tokens: number, limits: Limits,
                              lastAsked: number | undefined): boolean {
  const threshold = limits.contextWindow - limits.reserveTokens;
  if (limits.contextWindow <= 0 || threshold <= 0) return false;
  if (tokens <= threshold - band(threshold) || tokens > threshold) return false;
  if (lastAsked === undefined) return true;
  const lasts = threshold - lastAsked <= 0.8 * limits.keepRecentTokens;
  return !lasts && tokens - lastAsked >= limits.keepRecentTokens / 2;
}
