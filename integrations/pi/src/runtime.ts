/**
 * The running pi's own module: its version (which summary format and `max_tokens` it uses),
 * its settings files where it has no `pi.getSettings()` (0.73), and its token estimate of the
 * context after a compaction (1.6). Both pi 1.6 and 0.73 resolve "@mariozechner/pi-coding-agent"
 * in an extension to themselves; outside pi (the tests) the installed 1.6 answers.
 */

import type { BranchEntry } from "./answer.ts";
import type { EstimateAfter } from "./bridge.ts";
import type { PiSettings } from "./agent.ts";

/** The exports of pi's package the extension uses, each optional (versions differ). */
export interface PiModule {
  VERSION?: string;
  estimateTokens?: (message: unknown) => number;
  buildSessionProjection?: (entries: readonly unknown[]) => { messages: unknown[] };
  SettingsManager?: { create(cwd: string): { getGlobalSettings(): object;
                                             getProjectSettings(): object } };
}

export interface PiRuntime {
  version: string;
  /** pi's settings files merged as pi merges them (for a pi without getSettings()). */
  readSettings(cwd: string): PiSettings | undefined;
  estimateAfter: EstimateAfter | undefined;
}

// A specifier in a variable: pi's loader maps it at run time; tsc does not look it up.
const PI_MODULES = ["@mariozechner/pi-coding-agent", "@earendil-works/pi-coding-agent"];

export async function loadRuntime(): Promise<PiRuntime> {
  let pi: PiModule = {};
  for (const name of PI_MODULES) {
    try {
      pi = (await import(name)) as PiModule;
      break;
    } catch {
      continue;
    }
  }
  return { version: pi.VERSION ?? "0.0.0", readSettings: settingsReader(pi),
           estimateAfter: estimator(pi) };
}

/** Deep merge as pi's settings manager does: objects merge, anything else is replaced. */
export function deepMerge(base: Record<string, unknown>,
                          over: Record<string, unknown>): Record<string, unknown> {
  const merged = { ...base };
  const object = (v: unknown): v is Record<string, unknown> =>
    typeof v === "object" && v !== null && !Array.isArray(v);
  for (const [key, value] of Object.entries(over)) {
    if (value === undefined) continue;
    const current = merged[key];
    merged[key] = object(current) && object(value) ? deepMerge(current, value) : value;
  }
  return merged;
}

/** Reads pi's settings files with `pi`'s own settings manager (for pi 0.73). */
export function settingsReader(pi: PiModule): PiRuntime["readSettings"] {
  return (cwd) => {
    if (!pi.SettingsManager) return undefined;
    try {
      const manager = pi.SettingsManager.create(cwd);
      return deepMerge(manager.getGlobalSettings() as Record<string, unknown>,
                       manager.getProjectSettings() as Record<string, unknown>) as PiSettings;
    } catch {
      return undefined;
    }
  };
}

/** pi 1.6's own figure: its projection of the branch with the compaction appended, estimated
 * message by message (what it computes after appending one itself). */
function estimator(pi: PiModule): EstimateAfter | undefined {
  const { buildSessionProjection: project, estimateTokens: estimate } = pi;
  if (!project || !estimate) return undefined;
  return (branch: readonly BranchEntry[], compaction) => {
    const leaf = branch.at(-1);
    const entry = { type: "compaction", id: "compactor-estimate", parentId: leaf?.id ?? null,
                    timestamp: new Date().toISOString(), fromHook: true, ...compaction };
    const messages = project([...branch, entry]).messages;
    return messages.reduce((total: number, message) => total + estimate(message), 0);
  };
}
