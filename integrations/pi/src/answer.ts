/**
 * Judging and completing Compactor's answer before pi takes it: whether its cut summarises
 * anything pi's context holds (pi 0.73.1 once took a draft that kept everything, issue 38), and
 * the bookkeeping pi records with a compaction (`usage`, pi's own Usage shape).
 */

import type { JobRecord, TokenUsage } from "./api.ts";

/** The fields of a pi session entry on the branch the judgement reads. */
export interface BranchEntry {
  id: string;
  type: string;
  firstKeptEntryId?: string;
}

// The entries whose messages reach the model (pi's sessionEntryToContextMessages); model and
// thinking-level changes, labels, custom state and session info carry none.
const CONTEXT_TYPES: ReadonlySet<string> = new Set(["message", "custom_message",
                                                    "branch_summary"]);

/**
 * How many context entries a compaction that keeps from `firstKeptId` would summarise: the
 * entries before it in pi's context after its latest compaction (that compaction's kept tail,
 * then what came after it). Undefined when `firstKeptId` is not in that context at all (off the
 * branch, or summarised already).
 */
export function summarisedBefore(branch: readonly BranchEntry[],
                                 firstKeptId: string): number | undefined {
  let last = -1;
  for (let i = branch.length - 1; i >= 0; i -= 1) {
    if (branch[i]?.type === "compaction") { last = i; break; }
  }
  let context: readonly BranchEntry[] = branch;
  if (last >= 0) {
    const keptFrom = branch.findIndex((e) => e.id === branch[last]?.firstKeptEntryId);
    const tail = keptFrom >= 0 && keptFrom < last ? branch.slice(keptFrom, last) : [];
    context = [...tail, ...branch.slice(last + 1)];
  }
  const at = context.findIndex((e) => e.id === firstKeptId);
  if (at < 0) return undefined;
  return context.slice(0, at).filter((e) => CONTEXT_TYPES.has(e.type)).length;
}

/** pi's Usage (its pi-ai types): tokens and cost of the summary calls. */
export interface PiUsage {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  totalTokens: number;
  cost: { input: number; output: number; cacheRead: number; cacheWrite: number;
          total: number };
}

/**
 * What Compactor's model calls for this compaction used, as pi's Usage: the job's own calls and
 * those of the drafts it was built on (pi never saw those jobs). Compactor prices calls as a
 * whole (`costUsd`), so the total is all pi's cost gets; undefined without any usage.
 */
export function piUsage(record: Pick<JobRecord, "usage" | "draftUsage" | "costUsd"
                                     | "draftCostUsd">): PiUsage | undefined {
  const parts = [record.usage, record.draftUsage].filter((u): u is TokenUsage => !!u);
  if (parts.length === 0) return undefined;
  const sum = (key: keyof TokenUsage): number =>
    parts.reduce((total, part) => total + (Number(part[key]) || 0), 0);
  const usage = { input: sum("input"), output: sum("output"), cacheRead: sum("cacheRead"),
                  cacheWrite: sum("cacheWrite") };
  const total = (record.costUsd ?? 0) + (record.draftCostUsd ?? 0);
  return { ...usage,
           totalTokens: usage.input + usage.output + usage.cacheRead + usage.cacheWrite,
           cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total } };
}
