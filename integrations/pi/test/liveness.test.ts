/**
 * Never slower than pi alone: no worker alive means pi's built-in at once, a worker lost while
 * pi waits ends the wait; an answer that keeps everything is not taken; the answer carries pi's
 * bookkeeping; notices come once per outage; the precompute's guards (issue 41's mutations).
 */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { SessionManager, estimateTokens } from "@earendil-works/pi-coding-agent";

import { CompactorApi } from "../src/api.ts";
import { Bridge, type CompactEvent } from "../src/bridge.ts";
import type { Config } from "../src/config.ts";
import { Notices, RECOVERED } from "../src/notices.ts";
import { loadRuntime } from "../src/runtime.ts";
import { problem, standIn, type Answer, type Seen, type StandIn } from "./standin.ts";

let server: StandIn;
let said: string[];
beforeEach(async () => {
  server = await standIn();
  said = [];
});
afterEach(() => server.close());

const AGENT = { reserveTokens: 4000, keepRecentTokens: 3000, tokenizer: "estimate" as const };
const CONFIG: Config = { url: "", token: undefined, timeoutMs: 60_000, syncTimeoutMs: 500,
                         requestTimeoutMs: 1000, precompute: true };

/** A bridge to the stand-in, its notices as the extension says them (`said`: the causes said);
 * with `estimate`, pi's own estimate after a compaction. */
async function bridge(overrides: Partial<Config> = {}, estimate = false): Promise<Bridge> {
  const config = { ...CONFIG, url: server.url, ...overrides };
  const sink = said;
  const notices = new Notices(() => undefined);
  const estimateAfter = estimate ? (await loadRuntime()).estimateAfter : undefined;
  return new Bridge(new CompactorApi(server.url, undefined, config.requestTimeoutMs), config,
                    (cause, text) => { if (notices.say(cause, text)) sink.push(cause); },
                    estimateAfter);
}

function conversation(turns = 3): SessionManager {
  const manager = SessionManager.inMemory("/repo");
  for (let turn = 0; turn < turns; turn += 1) {
    manager.appendMessage({ role: "user", content: `step ${turn} `.repeat(50), timestamp: turn });
  }
  return manager;
}

function compactEvent(manager: SessionManager): CompactEvent {
  return { reason: "threshold", branchEntries: manager.getBranch(),
           preparation: { tokensBefore: 123 }, signal: new AbortController().signal };
}

function entry(firstKeptEntryId: string | undefined) {
  return { id: "c0mpact0", type: "compaction", summary: "## Goal\nCompactor's",
           firstKeptEntryId, tokensBefore: 99, details: {} };
}

/** Sessions accepted; workers and jobs as the test says. */
function routes(workers: () => Answer, jobs: (seen: Seen) => Answer) {
  return (seen: Seen): Answer => seen.path.includes("/jsonl") || seen.path.endsWith("/entries")
    || seen.path.endsWith("/leaf") ? { status: 200, body: {} }
    : seen.path === "/v1/workers" ? workers() : jobs(seen);
}

const asked = (): Seen[] => server.seen.filter((s) => s.path.endsWith("/compact"));

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; !check(); i += 1) {
    if (i > 400) throw new Error(`${what}: not within 8 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("no worker alive: nothing at once, nothing asked, said once", async () => {
  const manager = conversation();
  server.script = routes(() => ({ status: 200, body: { alive: 0 } }),
                         () => ({ status: 202, body: { jobId: "j" } }));
  const hooks = await bridge();
  assert.equal(await hooks.compact(manager, compactEvent(manager), 32_000, AGENT), undefined);
  assert.equal(await hooks.compact(manager, compactEvent(manager), 32_000, AGENT), undefined);
  assert.deepEqual(asked(), []);
  assert.deepEqual(said, ["no-worker"]);
});

test("a server without GET /v1/workers: today's behaviour (the job is awaited)", async () => {
  const manager = conversation();
  server.script = routes(() => problem(404, "not_found"), (seen) =>
    seen.path.endsWith("/compact") ? { status: 202, body: { jobId: "j1" } }
      : { status: 200, body: { id: "j1", state: "succeeded",
                               entry: entry(manager.getEntries()[1]?.id) } });
  const answer = await (await bridge()).compact(manager, compactEvent(manager), 32_000, AGENT);
  assert.equal(answer?.compaction?.summary, "## Goal\nCompactor's");
  assert.deepEqual(said, []);
});

test("the record says workerLost: the wait ends at once, the job is cancelled", async () => {
  const manager = conversation();
  server.script = routes(() => ({ status: 200, body: { alive: 1 } }), (seen) =>
    seen.path.endsWith("/compact") ? { status: 202, body: { jobId: "j2" } }
      : seen.path.endsWith("/cancel") ? { status: 200, body: {} }
      : { status: 200, body: { id: "j2", state: "running", workerLost: true } });
  assert.equal(await (await bridge()).compact(manager, compactEvent(manager), 1, AGENT),
               undefined);
  await until(() => server.seen.some((s) => s.path === "/v1/jobs/j2/cancel"), "a cancel");
  assert.deepEqual(said, ["worker-lost"]);
});

test("the last worker dies while pi waits: given up on within a poll", async () => {
  const manager = conversation();
  let alive = 1;
  let polls = 0;
  let pollsAfterDeath = 0;
  server.script = routes(() => ({ status: 200, body: { alive } }), (seen) => {
    if (seen.path.endsWith("/compact")) return { status: 202, body: { jobId: "j3" } };
    if (seen.path.endsWith("/cancel")) return { status: 200, body: {} };
    polls += 1;
    if (alive === 0) pollsAfterDeath += 1;
    if (polls === 2) alive = 0;  // the worker's heartbeat expired
    // the server holds the long poll for its wait (the request's ?wait=, at most 1 s)
    const wait = Number(new URL(seen.path, "http://x").searchParams.get("wait"));
    assert.ok(wait <= 1, seen.path);
    return { status: 200, body: { id: "j3", state: "running" }, delayMs: wait * 100 };
  });
  assert.equal(await (await bridge()).compact(manager, compactEvent(manager), 1, AGENT),
               undefined);
  // GET /v1/workers is asked again once its answer is a second old: a few polls of 0.1 s
  assert.ok(pollsAfterDeath <= 12, `${pollsAfterDeath} polls after the worker died`);
  assert.deepEqual(said, ["no-worker"]);
});

test("an answer that summarises nothing is not taken (pi 0.73.1's draft)", async () => {
  const manager = conversation();
  const first = manager.getEntries()[0]?.id;
  server.script = routes(() => ({ status: 200, body: { alive: 1 } }),
                         () => ({ status: 200, body: { jobId: "j4", entry: entry(first) } }));
  assert.equal(await (await bridge()).compact(manager, compactEvent(manager), 1, AGENT),
               undefined);
  assert.deepEqual(said, ["keeps-everything"]);
});

test("the answer carries the job's usage and pi's own estimate after it", async () => {
  const manager = conversation(4);
  const kept = manager.getEntries()[2]!.id;
  server.script = routes(() => ({ status: 200, body: { alive: 1 } }), (seen) =>
    seen.path.endsWith("/compact") ? { status: 200, body: { jobId: "j5", entry: entry(kept) } }
      : { status: 200, body: { id: "j5", state: "succeeded", entry: entry(kept),
                               usage: { input: 10, output: 5 },
                               draftUsage: { input: 100, output: 50 }, costUsd: 0.01 } });
  const hooks = await bridge({}, true);
  const answer = await hooks.compact(manager, compactEvent(manager), 1, AGENT);
  assert.deepEqual(answer?.compaction?.usage, {
    input: 110, output: 55, cacheRead: 0, cacheWrite: 0, totalTokens: 165,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.01 } });
  // pi's figure once it appended the compaction: what its session manager projects then
  manager.appendCompaction("## Goal\nCompactor's", kept, 123, {}, true);
  const after = manager.buildSessionProjection().messages
    .reduce((total, message) => total + estimateTokens(message), 0);
  assert.equal(answer?.compaction?.estimatedTokensAfter, after);
  assert.ok(after > 0);
});

test("notices: once per outage, again after Compactor answered in between", async () => {
  const manager = conversation();
  const kept = manager.getEntries()[1]?.id;
  let up = false;
  server.script = routes(() => ({ status: 200, body: { alive: 1 } }), () => up
    ? { status: 200, body: { jobId: "j6", entry: entry(kept) } } : problem(503, "unavailable"));
  const hooks = await bridge();
  const compact = () => hooks.compact(manager, compactEvent(manager), 1, AGENT);
  assert.equal(await compact(), undefined);
  assert.equal(await compact(), undefined);
  up = true;
  assert.ok((await compact())?.compaction);
  up = false;
  assert.equal(await compact(), undefined);
  assert.deepEqual(said, ["unreachable", RECOVERED, "unreachable"]);
});

test("precompute: a compaction meanwhile makes the draft moot (the epoch guard)", async () => {
  const manager = conversation();
  let release: () => void = () => undefined;
  const imported = new Promise<void>((resolve) => { release = resolve; });
  server.script = async (seen) => {
    if (seen.path.includes("/jsonl")) await imported;  // the mirror's sync is under way
    return seen.path.endsWith("/compact") ? { status: 202, body: { jobId: "d1" } }
                                          : { status: 200, body: {} };
  };
  const hooks = await bridge();
  hooks.precompute(manager, 26_000, AGENT, 32_000);
  await until(() => server.seen.some((s) => s.path.includes("/jsonl")), "the import");
  hooks.compacted();  // pi compacted while the draft waited for the mirror
  release();
  await hooks.flush(manager, 2000);
  // a request after the sync: were the draft asked, it would have been sent before this one
  await fetch(`${server.url}/marker`);
  assert.deepEqual(server.seen.at(-1)?.path, "/marker");
  assert.deepEqual(asked(), []);
});

test("precompute: a failed draft request is asked again after the next turn", async () => {
  const manager = conversation();
  let failures = 0;
  server.script = (seen) => {
    if (!seen.path.endsWith("/compact")) return { status: 200, body: {} };
    failures += 1;
    return failures === 1 ? problem(503, "unavailable") : { status: 202, body: { jobId: "d2" } };
  };
  const hooks = await bridge();
  hooks.precompute(manager, 26_000, AGENT, 32_000);
  await until(() => failures === 1, "the first draft request");
  await hooks.flush(manager, 2000);
  // the same tokens (no later state): asked again only because the failed request was forgotten
  for (let turn = 0; failures < 2 && turn < 100; turn += 1) {
    hooks.precompute(manager, 26_000, AGENT, 32_000);
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(failures, 2);
});
