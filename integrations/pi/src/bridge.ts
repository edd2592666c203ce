/**
 * pi's compaction and tree hooks answered by Compactor. Each answer is Compactor's or nothing:
 * returning nothing lets pi's built-in run, which is what happens whenever Compactor cannot give
 * a sound answer in time (unreachable, slower than `timeoutMs`, behind on the mirror, refusing).
 */

import { piUsage, summarisedBefore, type BranchEntry, type PiUsage } from "./answer.ts";
import {
  Refused,
  Unreachable,
  type AgentSettings,
  type CompactorApi,
  type CompactRequest,
  type JobRecord,
  type Started,
  type SummaryEntry,
} from "./api.ts";
import type { Config } from "./config.ts";
import { Mirror, type Report, type SessionView } from "./mirror.ts";
import { RECOVERED } from "./notices.ts";
import { limitsFor, precomputeDue } from "./precompute.ts";

/** The fields of pi's `session_before_compact` event the bridge reads (pi 0.73 sends no
 * `reason`). */
export interface CompactEvent {
  reason?: "manual" | "threshold" | "overflow" | undefined;
  customInstructions?: string | undefined;
  branchEntries: readonly BranchEntry[];
  preparation: { tokensBefore: number; firstKeptEntryId?: string };
  signal: AbortSignal;
}

export interface CompactAnswer {
  cancel?: boolean;
  compaction?: {
    summary: string;
    firstKeptEntryId: string;
    tokensBefore: number;
    /** pi's estimate of its context after this compaction (pi 1.6's field). */
    estimatedTokensAfter?: number;
    /** Compactor's model calls for it (pi 1.6's field). */
    usage?: PiUsage;
    details: Record<string, unknown>;
  };
}

/** pi's estimate of its context once a compaction keeping from `firstKeptEntryId` is appended
 * to `branch` (pi's own functions; undefined where pi has none, as 0.73). */
export type EstimateAfter = (branch: readonly BranchEntry[],
                             compaction: { summary: string; firstKeptEntryId: string;
                                           tokensBefore: number }) => number | undefined;

/** The fields of pi's `session_before_tree` event the bridge reads. */
export interface TreeEvent {
  preparation: {
    targetId: string;
    oldLeafId: string | null;
    userWantsSummary: boolean;
    entriesToSummarize: readonly unknown[];
    customInstructions?: string | undefined;
    replaceInstructions?: boolean | undefined;
  };
  signal: AbortSignal;
}

export interface TreeAnswer {
  cancel?: boolean;
  summary?: { summary: string; details: Record<string, unknown> };
}

/** A job's entry, where it came from, and its record when known. */
interface Done {
  jobId: string;
  entry: SummaryEntry;
  fromDraft: boolean;
  record: JobRecord | undefined;
}

/** What pi's entry records of Compactor's: the job, the entry in Compactor, its count. */
function origin(done: Done): Record<string, unknown> {
  return { jobId: done.jobId, entryId: done.entry.id, fromDraft: done.fromDraft,
           tokensBefore: done.entry.tokensBefore };
}

// A job is awaited in short long-polls: between two, a lost worker (the record's `workerLost`,
// or none alive) ends the wait, so pi's built-in starts soon after a worker dies.
const POLL_S = 0.5;
// How long an answer of GET /v1/workers is taken as still true.
const WORKERS_FRESH_MS = 500;
// The applied draft's record (for its usage) is asked for once, briefly: it is bookkeeping.
const RECORD_MS = 1000;

export class Bridge {
  private mirror: Mirror | undefined;
  private lastAsked: number | undefined;
  /** +1 when a compaction starts or is appended: a draft asked for before is moot. */
  private epoch = 0;
  private readonly api: CompactorApi;
  private readonly config: Config;
  private readonly report: Report;
  private readonly estimateAfter: EstimateAfter | undefined;
  private workersSeen: { at: number; alive: number | undefined } | undefined;

  constructor(api: CompactorApi, config: Config, report: Report,
              estimateAfter?: EstimateAfter) {
    this.api = api;
    this.config = config;
    this.report = report;
    this.estimateAfter = estimateAfter;
  }

  /** The mirror of `session` (a new one when pi switched sessions). */
  attach(session: SessionView): Mirror {
    if (this.mirror?.sessionId !== session.getSessionId()) {
      this.mirror = new Mirror(this.api, session, this.report);
      this.lastAsked = undefined;
    }
    return this.mirror;
  }

  /** pi appended something (or may have): mirror it soon. */
  activity(session: SessionView): void {
    this.attach(session).schedule();
  }

  /** A compaction was appended: the next draft is for the context after it. */
  compacted(): void {
    this.lastAsked = undefined;
    this.epoch += 1;
  }

  /** Ask for a draft when the context is in the band below the threshold; never waits. The
   * draft is planned with `agent`, pi's settings, as the compaction applying it will be. */
  precompute(session: SessionView, tokens: number | null | undefined,
             agent: AgentSettings | undefined, contextWindow: number | undefined): void {
    const limits = contextWindow ? limitsFor(agent, contextWindow) : undefined;
    if (!this.config.precompute || tokens == null || !limits) return;
    const mirror = this.attach(session);
    if (!precomputeDue(tokens, limits, this.lastAsked)) return;
    this.lastAsked = tokens;
    const epoch = this.epoch;
    void (async () => {
      await mirror.sync(true);  // the draft is planned on what Compactor has: all of it
      if (epoch !== this.epoch) return;  // pi compacted meanwhile: it would draft the past
      const request: CompactRequest = { reason: "speculative",
                                        contextWindow: limits.contextWindow };
      if (agent) request.agent = agent;
      await this.api.compact(mirror.sessionId, request);
    })().catch(() => {
      this.lastAsked = undefined;  // ask again after the next turn
    });
  }

  async flush(session: SessionView, timeoutMs: number): Promise<void> {
    await this.attach(session).settle(timeoutMs);
  }

  async compact(session: SessionView, event: CompactEvent, contextWindow: number | undefined,
                agent: AgentSettings | undefined): Promise<CompactAnswer | undefined> {
    const mirror = this.attach(session);
    this.epoch += 1;
    if (await this.noWorker("compaction", event.signal)) return undefined;
    if (!(await this.ready(mirror, "compaction"))) return undefined;
    // Without a reason (pi 0.73), a compaction with instructions is the user's; one without
    // is taken for a threshold compaction, which may apply a draft.
    const reason = event.reason ?? (event.customInstructions ? "manual" : "threshold");
    const request: CompactRequest = { reason };
    if (event.customInstructions) request.instructions = event.customInstructions;
    if (contextWindow) request.contextWindow = contextWindow;
    if (agent) request.agent = agent;
    const done = await this.run(mirror, "compaction", event.signal,
                                () => this.api.compact(mirror.sessionId, request, event.signal));
    if (event.signal.aborted) return { cancel: true };
    const entry = done?.entry;
    if (!done || !entry?.firstKeptEntryId || !this.sound(event, entry.firstKeptEntryId)) {
      return undefined;
    }
    this.report(RECOVERED, "Compactor answers again");
    const compaction: NonNullable<CompactAnswer["compaction"]> = {
      summary: entry.summary,
      firstKeptEntryId: entry.firstKeptEntryId,
      // pi's own count of its context, as its built-in would record (Compactor counts with
      // its tokenizer; that count is in details).
      tokensBefore: event.preparation.tokensBefore,
      details: { ...entry.details, compactor: origin(done) },
    };
    const usage = done.record ? piUsage(done.record) : undefined;
    if (usage) compaction.usage = usage;
    const after = this.estimate(event.branchEntries, compaction);
    if (after !== undefined) compaction.estimatedTokensAfter = after;
    return { compaction };
  }

  /** Whether a cut at `firstKeptId` is one pi can take: on pi's branch, in its context, and
   * summarising something (a cut that keeps everything would have pi compact again at once). */
  private sound(event: CompactEvent, firstKeptId: string): boolean {
    const summarised = summarisedBefore(event.branchEntries, firstKeptId);
    if (summarised === undefined) {
      this.report("cut", `Compactor's cut ${firstKeptId} is not in pi's context: `
        + "pi's built-in compaction ran instead");
      return false;
    }
    if (summarised === 0) {
      this.report("keeps-everything", `Compactor's summary keeps everything (cut at `
        + `${firstKeptId}, pi's own cut is at ${event.preparation.firstKeptEntryId ?? "?"}): `
        + "pi's built-in compaction ran instead");
      return false;
    }
    return true;
  }

  private estimate(branch: readonly BranchEntry[],
                   compaction: Parameters<EstimateAfter>[1]): number | undefined {
    try {
      return this.estimateAfter?.(branch, compaction);
    } catch {
      return undefined;  // bookkeeping: pi computes its own after appending
    }
  }

  async tree(session: SessionView, event: TreeEvent,
             agent: AgentSettings | undefined): Promise<TreeAnswer | undefined> {
    const p = event.preparation;
    if (!p.userWantsSummary || p.entriesToSummarize.length === 0) return undefined;
    if (p.replaceInstructions) {
      this.report("replace", "Compactor adds custom instructions to its prompt, it does not "
        + "replace the prompt: pi's built-in summarises such a branch");
      return undefined;
    }
    const mirror = this.attach(session);
    if (await this.noWorker("branch summary", event.signal)) return undefined;
    if (!(await this.ready(mirror, "branch summary"))) return undefined;
    const done = await this.run(mirror, "branch summary", event.signal,
      () => this.api.branchSummary(mirror.sessionId, p.targetId, p.customInstructions, agent,
                                   event.signal));
    if (event.signal.aborted) return { cancel: true };
    if (!done) return undefined;
    this.report(RECOVERED, "Compactor answers again");
    return { summary: { summary: done.entry.summary,
                        details: { ...done.entry.details, compactor: origin(done) } } };
  }

  /**
   * Whether Compactor says no worker is alive (`GET /v1/workers`, an answer at most
   * {@link WORKERS_FRESH_MS} old): then nothing would run the job and pi's built-in runs at
   * once. A server without the route, or one that does not answer, says nothing here.
   */
  private async noWorker(what: string, signal: AbortSignal): Promise<boolean> {
    const seen = this.workersSeen;
    let alive = seen && Date.now() - seen.at <= WORKERS_FRESH_MS ? seen.alive : undefined;
    if (!seen || Date.now() - seen.at > WORKERS_FRESH_MS) {
      try {
        const late = AbortSignal.timeout(this.config.syncTimeoutMs);
        alive = await this.api.workers(AbortSignal.any([signal, late]));
      } catch {
        alive = undefined;  // unreachable or refused: the request that follows says so
      }
      this.workersSeen = { at: Date.now(), alive };
    }
    if (alive !== 0) return false;
    this.report("no-worker", `no Compactor worker is alive at ${this.api.url}: pi's built-in `
      + `${what} runs`);
    return true;
  }

  /** Whether Compactor has the whole session as pi has it (waits `syncTimeoutMs` at most). */
  private async ready(mirror: Mirror, what: string): Promise<boolean> {
    if (mirror.broken) return false;  // said when it broke
    if (await mirror.settle(this.config.syncTimeoutMs)) return true;
    if (mirror.broken) return false;
    if (mirror.unreachable) {
      this.report("unreachable", `Compactor at ${this.api.url} is unreachable `
        + `(${mirror.unreachable}): pi's built-in ${what} runs`);
    } else {
      this.report("behind", `the mirror of session ${mirror.sessionId} is behind (Compactor `
        + `has ${mirror.mirrored} of ${mirror.session.getEntries().length} entries): pi's `
        + `built-in ${what} runs`);
    }
    return false;
  }

  /**
   * Start a job and wait for its entry until `timeoutMs` passes or pi aborts; undefined (after
   * saying why) when pi's built-in should run instead.
   */
  private async run(mirror: Mirror, what: string, signal: AbortSignal,
                    start: () => Promise<Started>): Promise<Done | undefined> {
    const deadline = Date.now() + this.config.timeoutMs;
    let jobId: string | undefined;
    let entry: SummaryEntry | undefined;
    try {
      const started = await start();
      jobId = started.jobId;
      const record = started.entry ? await this.record(started.jobId, signal)
                                   : await this.wait(started.jobId, signal, deadline, what);
      entry = started.entry ?? record?.entry;
      if (!entry) return undefined;
      mirror.movedTo(entry.id);
      return { jobId, entry, fromDraft: started.entry !== undefined, record };
    } catch (err) {
      if (!signal.aborted) this.failed(err, what);
      return undefined;
    } finally {
      if (jobId && !entry) {
        // Given up on: stop it, and since it may commit all the same, let the mirror find
        // Compactor's leaf again rather than assume it.
        mirror.forgetLeaf();
        void this.api.cancel(jobId).catch(() => undefined);
      }
    }
  }

  /** An ended job's record (its usage), if the server gives it at once. */
  private async record(jobId: string, signal: AbortSignal): Promise<JobRecord | undefined> {
    try {
      return await this.api.job(jobId, 0, AbortSignal.any([signal,
                                                           AbortSignal.timeout(RECORD_MS)]));
    } catch {
      return undefined;
    }
  }

  /** The succeeded job's record, or undefined (after saying why) when pi's built-in runs. */
  private async wait(jobId: string, signal: AbortSignal, deadline: number,
                     what: string): Promise<JobRecord | undefined> {
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.report("timeout", `Compactor took longer than ${this.config.timeoutMs / 1000} s `
          + `for a ${what}: pi's built-in ran instead (COMPACTOR_PI_TIMEOUT_S)`);
        return undefined;
      }
      const record = await this.api.job(jobId, Math.min(left / 1000, POLL_S), signal);
      if (record.state === "succeeded") return record;
      if (record.state === "failed" || record.state === "cancelled") {
        this.report(`job-${record.state}`, `Compactor's ${what} job ${record.state}`
          + `${record.error ? `: ${record.error}` : ""}: pi's built-in ran instead`);
        return undefined;
      }
      if (record.workerLost) {
        this.report("worker-lost", `the Compactor worker running the ${what} is gone: pi's `
          + "built-in ran instead");
        return undefined;
      }
      if (await this.noWorker(what, signal)) return undefined;
    }
  }

  private failed(err: unknown, what: string): void {
    if (err instanceof Refused) {
      this.report(`refused-${err.code}`, `Compactor refused the ${what} (${err.message}): `
        + "pi's built-in ran instead");
    } else {
      const why = err instanceof Unreachable ? err.message : String(err);
      this.report("unreachable", `Compactor at ${this.api.url} is unreachable (${why}): `
        + `pi's built-in ${what} runs`);
    }
  }
}
