/**
 * pi's effective compaction settings, sent with every compact, draft and branch-summary request
 * (the `agent` object, docs/pi.md) so that Compactor plans the cut pi would plan: the same
 * reserve and kept tail (model overrides applied), pi's chars/4 token estimate, the summary
 * format of pi's version and the `max_tokens` pi itself would ask for.
 */

import type { AgentSettings } from "./api.ts";

/** The parts of pi's settings (settings.json, merged) the extension reads. */
export interface PiSettings {
  compaction?: CompactionSettings;
  branchSummary?: { reserveTokens?: number };
  compactor?: unknown;
}

/** The shape of pi's `compaction` settings, every field optional. */
export interface CompactionSettings {
  enabled?: boolean;
  reserveTokens?: number;
  keepRecentTokens?: number;
  modelOverrides?: Record<string, { reserveTokens?: number; keepRecentTokens?: number }>;
}

/** What the extension knows of pi's model. */
export interface ModelView {
  provider: string;
  id: string;
  maxTokens?: number | undefined;
}

// pi's defaults (its docs/settings.md), where settings.json says nothing.
export const PI_DEFAULTS = { reserveTokens: 16_384, keepRecentTokens: 20_000,
                             branchReserveTokens: 16_384 } as const;
const MAX_TOKENS = 10_000_000;  // the server's bound on every token count of `agent`

/** The summary format of pi `version`: 1.x and later write 1.6's, 0.x writes 0.73's. */
export function summaryFormat(version: string): "pi-1.6" | "pi-0.73" {
  const major = Number.parseInt(version, 10);
  return Number.isFinite(major) && major < 1 ? "pi-0.73" : "pi-1.6";
}

/** A token count the server accepts (a positive int up to its bound), or undefined. */
function tokens(value: unknown): number | undefined {
  if (typeof value !== "number" || !Number.isFinite(value)) return undefined;
  const whole = Math.floor(value);
  return whole > 0 ? Math.min(whole, MAX_TOKENS) : undefined;
}

/** The fields of `agent` with a value (the server refuses none of them, drops nothing). */
function defined(agent: { [K in keyof AgentSettings]: AgentSettings[K] | undefined }):
    AgentSettings {
  return Object.fromEntries(Object.entries(agent).filter(([, v]) => v !== undefined));
}

/**
 * pi's effective settings for `model` as the `agent` object, or undefined when pi's compaction
 * is off (then the extension uploads nothing and answers nothing). pi 0.73 knows no model
 * overrides and asks its summary calls for 0.8 and 0.5 of the reserve; pi 1.6 asks for the
 * model's output limit (its compaction.js), which its model layer fits into the window.
 */
export function agentSettings(settings: PiSettings | undefined, model: ModelView | undefined,
                              version: string): AgentSettings | undefined {
  const compaction = settings?.compaction;
  if (compaction?.enabled === false) return undefined;
  const format = summaryFormat(version);
  const override = format === "pi-1.6" && model
    ? compaction?.modelOverrides?.[`${model.provider}/${model.id}`] : undefined;
  const reserve = override?.reserveTokens ?? compaction?.reserveTokens
    ?? PI_DEFAULTS.reserveTokens;
  const keep = override?.keepRecentTokens ?? compaction?.keepRecentTokens
    ?? PI_DEFAULTS.keepRecentTokens;
  const output = format === "pi-1.6"
    ? { summary: tokens(model?.maxTokens), prefix: tokens(model?.maxTokens) }
    : { summary: tokens(0.8 * reserve), prefix: tokens(0.5 * reserve) };
  return defined({
    reserveTokens: tokens(reserve),
    keepRecentTokens: tokens(keep),
    tokenizer: "estimate",
    summaryFormat: format,
    summaryMaxTokens: output.summary,
    turnPrefixMaxTokens: output.prefix,
    branchReserveTokens: tokens(settings?.branchSummary?.reserveTokens
                                ?? PI_DEFAULTS.branchReserveTokens),
  });
}
