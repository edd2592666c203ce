/**
 * pi's compaction and tree hooks answered by Compactor. Each answer is Compactor's or nothing:
 * returning nothing lets pi's built-in run, which is what happens whenever Compactor cannot give
 * a sound answer in time (unreachable, slower than `timeoutMs`, behind on the mirror, refusing).
 */

import {
  Refused,
  Unreachable,
  type CompactorApi,
  type CompactRequest,
  type Started,
  type SummaryEntry,
} from "./api.ts";
import type { Config } from "./config.ts";
import { Mirror, type Report, type SessionView } from "./mirror.ts";
import { precomputeDue, type Limits } from "./precompute.ts";

/** The fields of pi's `session_before_compact` event the bridge reads (pi 0.73 sends no
 * `reason`). */
export interface CompactEvent {
  reason?: "manual" | "threshold" | "overflow" | undefined;
  customInstructions?: string | undefined;
  branchEntries: readonly { id: string }[];
  preparation: { tokensBefore: number };
  signal: AbortSignal;
}

export interface CompactAnswer {
  cancel?: boolean;
  compaction?: {
    summary: string;
    firstKeptEntryId: string;
    tokensBefore: number;
    details: Record<string, unknown>;
  };
}

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

/** A job's entry, and where it came from. */
interface Done {
  jobId: string;
  entry: SummaryEntry;
  fromDraft: boolean;
}

/** What pi's entry records of Compactor's: the job, the entry in Compactor, its count. */
function origin(done: Done): Record<string, unknown> {
  return { jobId: done.jobId, entryId: done.entry.id, fromDraft: done.fromDraft,
           tokensBefore: done.entry.tokensBefore };
}

// A long poll is cut by the server at its COMPACTOR_API_MAX_WAIT_S (60 s by default); shorter
// polls also notice a deadline or an abort sooner.
const POLL_S = 20;

export class Bridge {
  private mirror: Mirror | undefined;
  private lastAsked: number | undefined;
  /** +1 when a compaction starts or is appended: a draft asked for before is moot. */
  private epoch = 0;
  private readonly api: CompactorApi;
  private readonly config: Config;
  private readonly report: Report;

  constructor(api: CompactorApi, config: Config, report: Report) {
    this.api = api;
    this.config = config;
    this.report = report;
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

  /** Ask for a draft when the context is in the band below the threshold; never waits. */
  precompute(session: SessionView, tokens: number | null | undefined,
             limits: Limits | undefined): void {
    if (!this.config.precompute || tokens == null || !limits) return;
    const mirror = this.attach(session);
    if (!precomputeDue(tokens, limits, this.lastAsked)) return;
    this.lastAsked = tokens;
    const epoch = this.epoch;
    void (async () => {
      await mirror.sync(true);  // the draft is planned on what Compactor has: all of it
      if (epoch !== this.epoch) return;  // pi compacted meanwhile: it would draft the past
      await this.api.compact(mirror.sessionId,
                             { reason: "speculative", contextWindow: limits.contextWindow });
    })().catch(() => {
      this.lastAsked = undefined;  // ask again after the next turn
    });
  }

  async flush(session: SessionView, timeoutMs: number): Promise<void> {
    await this.attach(session).settle(timeoutMs);
  }

  async compact(session: SessionView, event: CompactEvent,
                contextWindow: number | undefined): Promise<CompactAnswer | undefined> {
    const mirror = this.attach(session);
    this.epoch += 1;
    if (!(await this.ready(mirror, "compaction"))) return undefined;
    // Without a reason (pi 0.73), a compaction with instructions is the user's; one without
    // is taken for a threshold compaction, which may apply a draft.
    const reason = event.reason ?? (event.customInstructions ? "manual" : "threshold");
    const request: CompactRequest = { reason };
    if (event.customInstructions) request.instructions = event.customInstructions;
    if (contextWindow) request.contextWindow = contextWindow;
    const done = await this.run(mirror, "compaction", event.signal,
                                () => this.api.compact(mirror.sessionId, request, event.signal));
    if (event.signal.aborted) return { cancel: true };
    const entry = done?.entry;
    if (!done || !entry?.firstKeptEntryId) return undefined;
    if (!event.branchEntries.some((e) => e.id === entry.firstKeptEntryId)) {
      this.report("cut", `Compactor's cut ${entry.firstKeptEntryId} is not on pi's branch: `
        + "pi's built-in compaction ran instead");
      return undefined;
    }
    return {
      compaction: {
        summary: entry.summary,
        firstKeptEntryId: entry.firstKeptEntryId,
        // pi's own count of its context, as its built-in would record (Compactor counts with
        // its tokenizer; that count is in details).
        tokensBefore: event.preparation.tokensBefore,
        details: { ...entry.details, compactor: origin(done) },
      },
    };
  }

  async tree(session: SessionView, event: TreeEvent): Promise<TreeAnswer | undefined> {
    const p = event.preparation;
    if (!p.userWantsSummary || p.entriesToSummarize.length === 0) return undefined;
    if (p.replaceInstructions) {
      this.report("replace", "Compactor adds custom instructions to its prompt, it does not "
        + "replace the prompt: pi's built-in summarises such a branch");
      return undefined;
    }
    const mirror = this.attach(session);
    if (!(await this.ready(mirror, "branch summary"))) return undefined;
    const done = await this.run(mirror, "branch summary", event.signal,
      () => this.api.branchSummary(mirror.sessionId, p.targetId, p.customInstructions,
                                   event.signal));
    if (event.signal.aborted) return { cancel: true };
    if (!done) return undefined;
    return { summary: { summary: done.entry.summary,
                        details: { ...done.entry.details, compactor: origin(done) } } };
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
      entry = started.entry ?? await this.wait(started.jobId, signal, deadline, what);
      if (!entry) return undefined;
      mirror.movedTo(entry.id);
      return { jobId, entry, fromDraft: started.entry !== undefined };
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

  private async wait(jobId: string, signal: AbortSignal, deadline: number,
                     what: string): Promise<SummaryEntry | undefined> {
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) {
        this.report("timeout", `Compactor took longer than ${this.config.timeoutMs / 1000} s `
          + `for a ${what}: pi's built-in ran instead (COMPACTOR_PI_TIMEOUT_S)`);
        return undefined;
      }
      const record = await this.api.job(jobId, Math.min(left / 1000, POLL_S), signal);
      if (record.state === "succeeded") return record.entry;
      if (record.state === "failed" || record.state === "cancelled") {
        this.report(`job-${record.state}`, `Compactor's ${what} job ${record.state}`
          + `${record.error ? `: ${record.error}` : ""}: pi's built-in ran instead`);
        return undefined;
      }
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
