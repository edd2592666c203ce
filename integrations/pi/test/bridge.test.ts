/** The hooks' answers: from a draft, from a job, and every way back to pi's built-in. */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { SessionManager } from "@earendil-works/pi-coding-agent";

import { CompactorApi } from "../src/api.ts";
import type { AgentSettings } from "../src/api.ts";
import { Bridge, type CompactEvent, type EstimateAfter, type TreeEvent } from "../src/bridge.ts";
import type { Config } from "../src/config.ts";
import { RECOVERED } from "../src/notices.ts";
import { deadUrl, problem, standIn, type Seen, type StandIn } from "./standin.ts";

let server: StandIn;

/** Waits (in short steps) until `check` holds. */
export async function until(check: () => boolean, what = "the condition"): Promise<void> {
  for (let i = 0; !check(); i += 1) {
    if (i > 400) throw new Error(`${what}: not within 8 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
let said: string[];
beforeEach(async () => {
  server = await standIn();
  said = [];
});
afterEach(() => server.close());

/** Collects the causes said into this test's list (a late report of an earlier test's timer
 * lands in that test's list, not this one's); a recovery only when `recoveries` is set. */
function report(recoveries = false): (cause: string) => void {
  const sink = said;
  return (cause) => { if (recoveries || cause !== RECOVERED) sink.push(cause); };
}

const CONFIG: Config = { url: "", token: undefined, timeoutMs: 2000, syncTimeoutMs: 500,
                         requestTimeoutMs: 1000, precompute: true };

/** pi's settings as the extension sends them (window 32 000, reserve 4 000, keep 3 000). */
export const AGENT: AgentSettings = {
  reserveTokens: 4000, keepRecentTokens: 3000, tokenizer: "estimate", summaryFormat: "pi-1.6",
  summaryMaxTokens: 4000, turnPrefixMaxTokens: 4000, branchReserveTokens: 16_384 };

function bridge(overrides: Partial<Config> = {}, url = server.url,
                estimateAfter?: EstimateAfter, recoveries = false): Bridge {
  const config = { ...CONFIG, url, ...overrides };
  return new Bridge(new CompactorApi(url, undefined, config.requestTimeoutMs), config,
                    report(recoveries), estimateAfter);
}

function conversation(): SessionManager {
  const manager = SessionManager.inMemory("/repo");
  for (let turn = 0; turn < 3; turn += 1) {
    manager.appendMessage({ role: "user", content: `step ${turn}`, timestamp: turn });
  }
  return manager;
}

function compactEvent(manager: SessionManager, extra: Partial<CompactEvent> = {}): CompactEvent {
  return { reason: "threshold", branchEntries: manager.getBranch(),
           preparation: { tokensBefore: 123 }, signal: new AbortController().signal, ...extra };
}

function entry(manager: SessionManager, type = "compaction") {
  return { id: "c0mpact0", type, summary: "## Goal\nCompactor's",
           firstKeptEntryId: manager.getEntries()[1]?.id, tokensBefore: 99,
           details: { readFiles: ["a.ts"], modifiedFiles: [] } };
}

/** Compactor's routes: sessions and entries accepted, one worker alive, jobs as `jobs` says. */
function compactor(jobs: (seen: Seen) => ReturnType<StandIn["script"]>,
                   workers: () => ReturnType<StandIn["script"]> =
                     () => ({ status: 200, body: { alive: 1 } })) {
  return (seen: Seen) => seen.path.includes("/jsonl") || seen.path.endsWith("/entries")
    || seen.path.endsWith("/leaf") ? { status: 200, body: {} }
    : seen.path === "/v1/workers" ? workers() : jobs(seen);
}

test("a threshold compaction from a draft: one request, Compactor's entry", async () => {
  const manager = conversation();
  server.script = compactor(() => ({ status: 200, body: { jobId: "j1",
                                                           entry: entry(manager) } }));
  const answer = await bridge().compact(manager, compactEvent(manager), 32_000, AGENT);
  assert.deepEqual(answer?.compaction, {
    summary: "## Goal\nCompactor's", firstKeptEntryId: manager.getEntries()[1]?.id,
    tokensBefore: 123, details: { readFiles: ["a.ts"], modifiedFiles: [], compactor: {
      jobId: "j1", entryId: "c0mpact0", fromDraft: true, tokensBefore: 99 } } });
  const asked = server.seen.find((s) => s.path.endsWith("/compact"));
  assert.deepEqual(asked?.body, { reason: "threshold", contextWindow: 32_000, agent: AGENT });
});

test("pi 0.73 names no reason: instructions make it manual, else a threshold", async () => {
  const manager = conversation();
  server.script = compactor(() => ({ status: 200, body: { jobId: "j0", entry: entry(manager) } }));
  const event = { ...compactEvent(manager), reason: undefined };
  await bridge().compact(manager, event, undefined, undefined);
  await bridge().compact(manager, { ...event, customInstructions: "keep it" }, undefined,
                         undefined);
  assert.deepEqual(server.seen.filter((s) => s.path.endsWith("/compact")).map((s) => s.body),
                   [{ reason: "threshold" }, { reason: "manual", instructions: "keep it" }]);
});

test("a manual compaction with instructions: a job, awaited", async () => {
  const manager = conversation();
  let polls = 0;
  server.script = compactor((seen) => {
    if (seen.path.endsWith("/compact")) return { status: 202, body: { jobId: "j2" } };
    polls += 1;
    return { status: 200, body: polls < 2 ? { id: "j2", state: "running" }
                                          : { id: "j2", state: "succeeded",
                                              entry: entry(manager) } };
  });
  const answer = await bridge().compact(
    manager, compactEvent(manager, { reason: "manual", customInstructions: "keep the parser" }),
    undefined, AGENT);
  assert.equal(answer?.compaction?.summary, "## Goal\nCompactor's");
  assert.deepEqual(server.seen.find((s) => s.path.endsWith("/compact"))?.body,
                   { reason: "manual", instructions: "keep the parser", agent: AGENT });
  assert.match(server.seen.at(-1)?.path ?? "", /^\/v1\/jobs\/j2\?wait=/);
});

test("Compactor unreachable: nothing (pi's built-in runs), said once", async () => {
  const manager = conversation();
  const hooks = bridge({}, await deadUrl());
  assert.equal(await hooks.compact(manager, compactEvent(manager), 32_000, AGENT), undefined);
  assert.equal(await hooks.compact(manager, compactEvent(manager), 32_000, AGENT), undefined);
  assert.deepEqual([...new Set(said)], ["unreachable"]);
});

test("slower than the timeout: the job is cancelled, pi's built-in runs", async () => {
  const manager = conversation();
  server.script = compactor((seen) => seen.path.endsWith("/compact")
    ? { status: 202, body: { jobId: "j3" } }
    : seen.path.endsWith("/cancel") ? { status: 200, body: { jobId: "j3", state: "running" } }
    : { status: 200, body: { id: "j3", state: "running" }, delayMs: 100 });
  const started = Date.now();
  assert.equal(await bridge({ timeoutMs: 300 }).compact(manager, compactEvent(manager), 1, AGENT),
               undefined);
  assert.ok(Date.now() - started < 1500);
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(server.seen.some((s) => s.path === "/v1/jobs/j3/cancel"));
  assert.deepEqual(said, ["timeout"]);
});

test("pi aborts: the job is cancelled and the compaction too", async () => {
  const manager = conversation();
  const abort = new AbortController();
  server.script = compactor((seen) => {
    if (seen.path.endsWith("/compact")) return { status: 202, body: { jobId: "j4" } };
    if (seen.path.endsWith("/cancel")) return { status: 200, body: {} };
    setTimeout(() => abort.abort(), 20);
    return { status: 200, body: { id: "j4", state: "running" }, delayMs: 500 };
  });
  const answer = await bridge().compact(manager, compactEvent(manager,
                                                              { signal: abort.signal }), 1,
                                        AGENT);
  assert.deepEqual(answer, { cancel: true });
  await new Promise((r) => setTimeout(r, 50));
  assert.ok(server.seen.some((s) => s.path === "/v1/jobs/j4/cancel"));
  assert.deepEqual(said, []);
});

test("a failed job, a refusal, a cut off pi's branch: pi's built-in runs", async () => {
  const manager = conversation();
  server.script = compactor((seen) => seen.path.endsWith("/compact")
    ? { status: 202, body: { jobId: "j5" } }
    : { status: 200, body: { id: "j5", state: "failed", error: "Auto-compaction failed: x" } });
  assert.equal(await bridge().compact(manager, compactEvent(manager), 1, AGENT), undefined);
  server.script = compactor(() => problem(409, "nothing_to_compact"));
  assert.equal(await bridge().compact(manager, compactEvent(manager), 1, AGENT), undefined);
  server.script = compactor(() => ({ status: 200, body: { jobId: "j6", entry: {
    ...entry(manager), firstKeptEntryId: "elsewhere" } } }));
  assert.equal(await bridge().compact(manager, compactEvent(manager), 1, AGENT), undefined);
  assert.deepEqual(said, ["job-failed", "refused-nothing_to_compact", "cut"]);
});

test("behind on the mirror: pi's built-in runs", async () => {
  const manager = conversation();
  server.script = (seen) => seen.path.includes("/jsonl") ? { status: 200, body: {} }
                                                         : { status: 200, body: {}, delayMs: 800 };
  const hooks = bridge({ syncTimeoutMs: 100 });
  await hooks.flush(manager, 1000);
  manager.appendMessage({ role: "user", content: "one more", timestamp: 9 });
  assert.equal(await hooks.compact(manager, compactEvent(manager), 1, AGENT), undefined);
  assert.deepEqual(said, ["behind"]);
  assert.ok(!server.seen.some((s) => s.path.endsWith("/compact")));
});

test("the tree: a branch summary job when the user wants a summary", async () => {
  const manager = conversation();
  const target = manager.getEntries()[0]!.id;
  const tree = (userWantsSummary: boolean, extra = {}): TreeEvent => ({
    preparation: { targetId: target, oldLeafId: manager.getLeafId(), userWantsSummary,
                   entriesToSummarize: manager.getEntries().slice(1), ...extra },
    signal: new AbortController().signal });
  server.script = compactor((seen) => seen.path.endsWith("/branch-summary")
    ? { status: 202, body: { jobId: "j7" } }
    : { status: 200, body: { id: "j7", state: "succeeded",
                             entry: { ...entry(manager, "branch_summary"), id: "b1" } } });
  assert.equal(await bridge().tree(manager, tree(false), AGENT), undefined);
  const answer = await bridge().tree(manager, tree(true, { customInstructions: "the lexer" }),
                                     AGENT);
  assert.equal(answer?.summary?.summary, "## Goal\nCompactor's");
  assert.deepEqual(server.seen.find((s) => s.path.endsWith("/branch-summary"))?.body,
                   { targetId: target, instructions: "the lexer", agent: AGENT });
  assert.equal(await bridge().tree(manager, tree(true, { replaceInstructions: true }), AGENT),
               undefined);
  assert.deepEqual(said, ["replace"]);
});

test("precompute: one speculative request a turn in the band, after the mirror", async () => {
  const manager = conversation();
  const hooks = bridge();
  const agent = { ...AGENT, reserveTokens: 8_000, keepRecentTokens: 6_000 };
  const asked = () => server.seen.filter((s) => s.path.endsWith("/compact"));
  hooks.precompute(manager, 10_000, agent, 32_000);  // below the band
  hooks.precompute(manager, 17_000, agent, 32_000);
  hooks.precompute(manager, 17_000, agent, 32_000);  // the same turn's agent_end: asked already
  await until(() => asked().length === 1);
  hooks.precompute(manager, 17_500, agent, 32_000);  // the next turn: its own draft
  hooks.precompute(manager, 25_000, agent, 32_000);  // over the threshold: pi compacts now
  await until(() => asked().length === 2);
  await hooks.flush(manager, 2000);
  await fetch(`${server.url}/marker`);  // were a third asked, it would have come before this
  assert.equal(server.seen.at(-1)?.path, "/marker");
  assert.deepEqual(asked().map((s) => s.body),
                   Array(2).fill({ reason: "speculative", contextWindow: 32_000, agent }));
  assert.ok(server.seen[0]?.path.includes("/jsonl"));  // the session went first
});
