/**
 * The mirror: every entry pi appends, copied into Compactor under pi's session id and entry ids,
 * so that Compactor plans on exactly pi's session and its cut points name pi's entries.
 *
 * It runs beside the agent, never in its way: activity schedules a sync (entries appended in a
 * burst go in one request), a failed sync is retried with backoff and catches up from where
 * Compactor stopped, and nothing pi waits for ever waits on it, except a hook that needs
 * Compactor to have the whole session (then for `syncTimeoutMs` at most: {@link Mirror.settle}).
 */

import { Refused, Unreachable, type CompactorApi } from "./api.ts";
import { RECOVERED } from "./notices.ts";

/** The fields of a pi session entry the mirror reads (pi's SessionEntry has them all). */
export interface EntryLike {
  id: string;
  parentId: string | null;
  type: string;
}

/** What the mirror reads of pi's session manager (a subset of ReadonlySessionManager). */
export interface SessionView {
  getSessionId(): string;
  getHeader(): object | null;
  getEntries(): EntryLike[];
  getLeafId(): string | null;
}

export type Step =
  | { kind: "leaf"; leafId: string | null }
  | { kind: "append"; entries: EntryLike[] };

export interface BatchLimits {
  entries: number;
  bytes: number;
}

// Under the server's defaults (1 000 entries, 16 MB a request): a large backlog goes in a few
// requests of bounded size rather than one the server would refuse.
export const BATCH: BatchLimits = { entries: 500, bytes: 4 * 1024 * 1024 };

/**
 * The requests that put `pending` (entries in pi's append order) into Compactor, whose leaf is
 * `remoteLeaf`: chains appended under the leaf, and a leaf move wherever an entry's parent is not
 * the entry before it (pi navigated the tree, or Compactor appended an entry of its own).
 */
export function mirrorSteps(pending: readonly EntryLike[], remoteLeaf: Leaf,
                            limits: BatchLimits = BATCH): Step[] {
  const steps: Step[] = [];
  let leaf = remoteLeaf;
  let batch: EntryLike[] = [];
  let bytes = 0;
  const close = (): void => {
    if (batch.length) steps.push({ kind: "append", entries: batch });
    batch = [];
    bytes = 0;
  };
  for (const entry of pending) {
    const size = JSON.stringify(entry).length;
    if (entry.parentId !== leaf) {
      close();
      steps.push({ kind: "leaf", leafId: entry.parentId });
    } else if (batch.length >= limits.entries || (batch.length && bytes + size > limits.bytes)) {
      close();
    }
    batch.push(entry);
    bytes += size;
    leaf = entry.id;
  }
  close();
  return steps;
}

export function toJsonl(header: object, entries: readonly object[]): string {
  return [header, ...entries].map((line) => JSON.stringify(line)).join("\n") + "\n";
}

export type Report = (cause: string, text: string) => void;

/** An entry id, null (no leaf: the next entry is a root) or {@link UNKNOWN}. */
export type Leaf = string | null | typeof UNKNOWN;

/** Compactor's leaf when the mirror cannot know it (a job it gave up on may yet commit). */
export const UNKNOWN: unique symbol = Symbol("unknown leaf");

// Retries of a failed sync: soon at first, then every 5 s while Compactor stays away (an
// attempt against a stopped server costs a refused connection; a hook never waits for them).
const RETRY_MS = [250, 1000, 2000, 5000];

export class Mirror {
  readonly sessionId: string;
  readonly session: SessionView;
  /** How many of pi's entries (append order) Compactor has. */
  mirrored = 0;
  /** Compactor's leaf, as far as this mirror knows. */
  remoteLeaf: Leaf = null;
  /** Why the mirror cannot go on (Compactor refused part of the session); hooks fall back. */
  broken: string | undefined;
  /** The last failure to reach Compactor, until a sync succeeds. */
  unreachable: string | undefined;
  private imported = false;
  private running: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private failures = 0;
  private readonly api: CompactorApi;
  private readonly report: Report;

  constructor(api: CompactorApi, session: SessionView, report: Report) {
    this.api = api;
    this.session = session;
    this.sessionId = session.getSessionId();
    this.report = report;
  }

  /** Sync soon, batching what else is appended meanwhile; never throws, never blocks. */
  schedule(delayMs = 20): void {
    if (this.timer || this.broken) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.sync().catch(() => undefined);
    }, delayMs);
    this.timer.unref?.();
  }

  /**
   * Bring Compactor up to pi's session, and with `alignLeaf` its leaf to pi's too (one sync at
   * a time: a caller waits for the running one, then runs its own).
   */
  async sync(alignLeaf = false): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
    if (this.broken) throw new Error(this.broken);
    this.running = this.push(alignLeaf);
    try {
      await this.running;
      if (this.unreachable) this.report(RECOVERED, `Compactor at ${this.api.url} answers again`);
      this.failures = 0;
      this.unreachable = undefined;
    } catch (err) {
      this.failed(err);
      throw err;
    } finally {
      this.running = undefined;
    }
  }

  /** Whether Compactor has every entry and pi's leaf. */
  caughtUp(): boolean {
    return this.imported && !this.broken && this.mirrored === this.session.getEntries().length
      && this.remoteLeaf === this.session.getLeafId();
  }

  /**
   * Sync and move Compactor's leaf to pi's, within `timeoutMs`: true when Compactor then has
   * the whole session as pi has it, false when it is behind (the caller falls back).
   */
  async settle(timeoutMs: number): Promise<boolean> {
    clearTimeout(this.timer);
    this.timer = undefined;
    // A sync that found Compactor's copy gone or different asked for a resync: run it now.
    const work = this.sync(true).catch((err: unknown) => {
      if (this.imported) throw err;
      return this.sync(true);
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => { timer = setTimeout(resolve, timeoutMs); });
    try {
      await Promise.race([work, late]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      work.catch(() => undefined);  // finishing late is still progress: keep it, unobserved
    }
    return this.caughtUp();
  }

  /** Compactor appended an entry of its own (a compaction or a branch summary) at its leaf. */
  movedTo(entryId: string): void {
    this.remoteLeaf = entryId;
  }

  /** Compactor's leaf may have moved without the mirror seeing it: set it before appending. */
  forgetLeaf(): void {
    this.remoteLeaf = UNKNOWN;
  }

  private async push(alignLeaf: boolean): Promise<void> {
    // A session manager that now holds another session is not this mirror's to copy.
    if (this.session.getSessionId() !== this.sessionId) return;
    // Read together, before any await: pi may append while this runs, and a leaf read later
    // could name an entry this sync does not send (the next sync will).
    const entries = this.session.getEntries();
    const leaf = this.session.getLeafId();
    if (!this.imported) {
      // The first sync (and a resync) sends the whole session: Compactor may not know it, or
      // know an older copy (pi resumed a session); pi's file is the truth.
      const header = this.session.getHeader();
      if (!header) return;
      await this.api.importSession(this.sessionId, toJsonl(header, entries));
      this.imported = true;
      this.mirrored = entries.length;
      this.remoteLeaf = entries.at(-1)?.id ?? null;  // an import's leaf is its last entry
    }
    for (const step of mirrorSteps(entries.slice(this.mirrored), this.remoteLeaf)) {
      if (step.kind === "leaf") {
        await this.api.setLeaf(this.sessionId, step.leafId);
        this.remoteLeaf = step.leafId;
      } else {
        await this.api.append(this.sessionId, step.entries);
        this.mirrored += step.entries.length;
        this.remoteLeaf = step.entries.at(-1)?.id ?? this.remoteLeaf;
      }
    }
    // pi moved its leaf without appending (a tree navigation without a summary): a hook needs
    // Compactor's there too; the next entry would move it anyway.
    if (alignLeaf && this.remoteLeaf !== leaf) {
      await this.api.setLeaf(this.sessionId, leaf);
      this.remoteLeaf = leaf;
    }
  }

  private failed(err: unknown): void {
    if (err instanceof Refused && ["session_not_found", "entry_exists", "entry_not_found"]
      .includes(err.code)) {
      // Compactor's copy is not what the mirror thought (an expired session, an append whose
      // answer was lost): send the whole session again.
      this.imported = false;
      this.schedule(0);
      return;
    }
    if (err instanceof Refused) {
      this.broken = `Compactor refused session ${this.sessionId}: ${err.message}`;
      this.report("refused", this.broken);
      return;
    }
    this.unreachable = err instanceof Unreachable ? err.message : String(err);
    this.report("unreachable", `Compactor at ${this.api.url} is unreachable `
      + `(${this.unreachable}): pi compacts by itself until it answers; the mirror catches up`);
    const delay = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)] ?? 5000;
    this.failures += 1;
    this.schedule(delay);
  }
}
