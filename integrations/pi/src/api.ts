/**
 * The routes of `compactor serve` the extension uses, over fetch. Two kinds of failure, because
 * the extension reacts to them differently: {@link Unreachable} (no answer: the network, a
 * timeout, a 5xx) is retried later; {@link Refused} (a problem+json answer with a stable `code`)
 * says what Compactor will not do.
 */

/** The fields of a compaction or branch_summary entry the extension reads. */
export interface SummaryEntry {
  id: string;
  type: string;
  summary: string;
  firstKeptEntryId?: string;
  tokensBefore?: number;
  details?: Record<string, unknown>;
}

export type JobState = "queued" | "running" | "succeeded" | "failed" | "cancelled";

/** Model tokens of a job (the record's `usage` and `draftUsage`). */
export interface TokenUsage {
  input?: number;
  output?: number;
  cacheRead?: number;
  cacheWrite?: number;
}

export interface JobRecord {
  id: string;
  state: JobState;
  entry?: SummaryEntry;
  error?: string;
  usage?: TokenUsage;
  /** What the drafts behind an applied compaction cost. */
  draftUsage?: TokenUsage;
  costUsd?: number;
  draftCostUsd?: number;
  /** The job is running but the worker holding it is gone (its heartbeat expired). */
  workerLost?: boolean;
}

/**
 * pi's compaction settings, the `agent` object of a compact or branch-summary request
 * (docs/pi.md): the worker plans with these where they are set, its own elsewhere.
 */
export interface AgentSettings {
  reserveTokens?: number;
  keepRecentTokens?: number;
  tokenizer?: "estimate" | "tiktoken";
  summaryFormat?: "pi-1.6" | "pi-0.73";
  summaryMaxTokens?: number;
  turnPrefixMaxTokens?: number;
  branchReserveTokens?: number;
}

export interface Started {
  jobId: string;
  /** Set when a speculative draft applied at once (200): the job has ended. */
  entry?: SummaryEntry;
}

export interface CompactRequest {
  reason: "manual" | "threshold" | "overflow" | "speculative";
  instructions?: string;
  contextWindow?: number;
  agent?: AgentSettings;
}

export class Unreachable extends Error {
  override name = "Unreachable";
}

export class Refused extends Error {
  override name = "Refused";
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, detail: string) {
    super(`${status} ${code}: ${detail}`);
    this.status = status;
    this.code = code;
  }
}

export const TERMINAL: ReadonlySet<JobState> = new Set(["succeeded", "failed", "cancelled"]);

type Body = string | Record<string, unknown> | undefined;

export class CompactorApi {
  readonly url: string;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;

  constructor(url: string, token: string | undefined, timeoutMs: number) {
    this.url = url;
    this.token = token;
    this.timeoutMs = timeoutMs;
  }

  /** Store a whole session (pi JSONL), replacing what Compactor had under its id. */
  async importSession(sessionId: string, jsonl: string): Promise<void> {
    await this.call("PUT", `/v1/sessions/${enc(sessionId)}/jsonl?replace=true`, jsonl);
  }

  /** Append entries (with pi's ids) as a chain under Compactor's leaf. */
  async append(sessionId: string, entries: readonly object[]): Promise<void> {
    await this.call("POST", `/v1/sessions/${enc(sessionId)}/entries`, { entries });
  }

  /** Move Compactor's leaf (null: the next entry starts a new root). */
  async setLeaf(sessionId: string, leafId: string | null): Promise<void> {
    await this.call("PUT", `/v1/sessions/${enc(sessionId)}/leaf`, { leafId });
  }

  async compact(sessionId: string, request: CompactRequest, signal?: AbortSignal):
      Promise<Started> {
    const body = { ...request } as Record<string, unknown>;
    return (await this.call("POST", `/v1/sessions/${enc(sessionId)}/compact`, body,
                            signal)) as Started;
  }

  async branchSummary(sessionId: string, targetId: string, instructions: string | undefined,
                      agent: AgentSettings | undefined, signal?: AbortSignal): Promise<Started> {
    const body: Record<string, unknown> = { targetId };
    if (instructions) body["instructions"] = instructions;
    if (agent) body["agent"] = agent;
    return (await this.call("POST", `/v1/sessions/${enc(sessionId)}/branch-summary`, body,
                            signal)) as Started;
  }

  /** The job's record; with `waitS`, held by the server until the job ends or that passes. */
  async job(jobId: string, waitS: number, signal?: AbortSignal): Promise<JobRecord> {
    const wait = Math.max(0, Math.round(waitS * 10) / 10);
    return (await this.call("GET", `/v1/jobs/${enc(jobId)}?wait=${wait}`, undefined, signal,
                            this.timeoutMs + wait * 1000)) as JobRecord;
  }

  /**
   * How many workers are alive (`GET /v1/workers`), or undefined when this server has no such
   * route (an older `compactor serve`: nothing is known).
   */
  async workers(signal?: AbortSignal): Promise<number | undefined> {
    try {
      const body = (await this.call("GET", "/v1/workers", undefined, signal)) as
        { alive?: unknown } | undefined;
      return typeof body?.alive === "number" ? body.alive : undefined;
    } catch (err) {
      if (err instanceof Refused && (err.status === 404 || err.status === 405)) return undefined;
      throw err;
    }
  }

  async cancel(jobId: string): Promise<void> {
    await this.call("POST", `/v1/jobs/${enc(jobId)}/cancel`, {});
  }

  private async call(method: string, path: string, body: Body, signal?: AbortSignal,
                     timeoutMs = this.timeoutMs): Promise<unknown> {
    const headers: Record<string, string> = {};
    if (this.token) headers["authorization"] = `Bearer ${this.token}`;
    if (typeof body === "string") headers["content-type"] = "application/x-ndjson";
    else if (body !== undefined) headers["content-type"] = "application/json";
    const timeout = AbortSignal.timeout(timeoutMs);
    let response: Response;
    try {
      const init: RequestInit = {
        method, headers, signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      };
      if (body !== undefined) init.body = typeof body === "string" ? body : JSON.stringify(body);
      response = await fetch(this.url + path, init);
    } catch (err) {
      if (signal?.aborted) throw err;  // pi's abort: not Compactor's fault
      throw new Unreachable(timeout.aborted ? `no answer within ${timeoutMs / 1000} s`
                                            : describe(err));
    }
    const text = await response.text();
    if (response.ok) return text ? JSON.parse(text) : undefined;
    if (response.status >= 500 && response.status !== 507) {
      throw new Unreachable(`${response.status} ${problem(text).detail}`);
    }
    const { code, detail } = problem(text);
    throw new Refused(response.status, code, detail);
  }
}

function enc(part: string): string {
  return encodeURIComponent(part);
}

function problem(text: string): { code: string; detail: string } {
  try {
    const body = JSON.parse(text) as { code?: unknown; detail?: unknown };
    return { code: String(body.code ?? "unknown"), detail: String(body.detail ?? text) };
  } catch {
    return { code: "unknown", detail: text.slice(0, 200) };
  }
}

/** fetch's TypeError hides the reason (ECONNREFUSED, ...) in its cause. */
function describe(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message ?? String(err);
}
