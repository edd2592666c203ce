/** The mirror, over HTTP to a stand-in, reading pi's own SessionManager. */
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { SessionManager } from "@earendil-works/pi-coding-agent";

import { CompactorApi } from "../src/api.ts";
import { Mirror } from "../src/mirror.ts";
import { deadUrl, problem, standIn, type StandIn } from "./standin.ts";

let server: StandIn;
let said: string[];
beforeEach(async () => {
  server = await standIn();
  said = [];
});
afterEach(() => server.close());

/** Collects what is said into this test's list (a late report of an earlier test's timer
 * lands in that test's list, not this one's). */
function report(): (cause: string) => void {
  const sink = said;
  return (cause) => { sink.push(cause); };
}

function session(): SessionManager {
  const manager = SessionManager.inMemory("/repo");
  manager.appendMessage({ role: "user", content: "fix the importer", timestamp: 1 });
  return manager;
}

function mirrorOf(manager: SessionManager, url = server.url): Mirror {
  return new Mirror(new CompactorApi(url, "tok", 2000), manager, report());
}

function reply(text: string) {
  return { role: "assistant" as const, content: [{ type: "text" as const, text }],
           api: "openai-completions", provider: "p", model: "m", stopReason: "stop" as const,
           usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2,
                    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
           timestamp: 2 };
}

test("the first sync sends the whole session, later ones what pi appended", async () => {
  const manager = session();
  const mirror = mirrorOf(manager);
  await mirror.sync();
  const [first] = server.seen;
  assert.equal(first?.method, "PUT");
  assert.equal(first?.path, `/v1/sessions/${manager.getSessionId()}/jsonl?replace=true`);
  assert.equal(first?.auth, "Bearer tok");
  const lines = String(first?.body).trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(lines[0].type, "session");
  assert.deepEqual(lines.slice(1).map((l) => l.id), manager.getEntries().map((e) => e.id));

  const a = manager.appendMessage(reply("looking"));
  const b = manager.appendMessage({ role: "user", content: "and the lexer", timestamp: 3 });
  await mirror.sync();
  assert.equal(server.seen.length, 2);
  const posted = server.seen[1]?.body as { entries: { id: string }[] };
  assert.deepEqual(posted.entries.map((e) => e.id), [a, b]);  // pi's ids, one request
  assert.ok(mirror.caughtUp());
});

test("pi's tree navigation and Compactor's own entries move the leaf first", async () => {
  const manager = session();
  const root = manager.getLeafId()!;
  const mirror = mirrorOf(manager);
  await mirror.sync();
  manager.appendMessage(reply("one"));
  await mirror.sync();
  mirror.movedTo("compactor-entry");  // Compactor appended a compaction under pi's leaf
  manager.branch(root);
  manager.appendMessage(reply("two"));
  await mirror.sync();
  const [leaf, append] = server.seen.slice(-2);
  assert.deepEqual([leaf?.method, leaf?.path, leaf?.body],
                   ["PUT", `/v1/sessions/${manager.getSessionId()}/leaf`, { leafId: root }]);
  assert.equal(append?.method, "POST");
  assert.ok(mirror.caughtUp());
});

test("settle moves Compactor's leaf to pi's after a navigation without an entry", async () => {
  const manager = session();
  const root = manager.getLeafId()!;
  manager.appendMessage(reply("one"));
  const mirror = mirrorOf(manager);
  await mirror.sync();
  manager.branch(root);
  assert.equal(mirror.caughtUp(), false);
  assert.equal(await mirror.settle(1000), true);
  assert.deepEqual(server.seen.at(-1)?.body, { leafId: root });
});

test("a failed sync never throws at pi, and catches up when Compactor answers", async () => {
  const manager = session();
  const mirror = mirrorOf(manager);
  await mirror.sync();
  let down = true;
  server.script = () => (down ? problem(503, "broker_unavailable") : { status: 200, body: {} });
  manager.appendMessage(reply("one"));
  mirror.schedule(0);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(mirror.caughtUp(), false);
  assert.match(mirror.unreachable ?? "", /503/);
  assert.deepEqual(said, ["unreachable"]);
  manager.appendMessage({ role: "user", content: "more", timestamp: 4 });
  down = false;
  await new Promise((r) => setTimeout(r, 600));  // the first retry comes after 250 ms
  assert.ok(mirror.caughtUp());
  const last = server.seen.at(-1)?.body as { entries: unknown[] };
  assert.equal(last.entries.length, 2);  // the backlog, in one request
});

test("Compactor without the session, or with other entries: the whole session again", async () => {
  const manager = session();
  const mirror = mirrorOf(manager);
  await mirror.sync();
  let lost = true;
  server.script = (seen) => {
    if (seen.method === "POST" && lost) {
      lost = false;
      return problem(404, "session_not_found");  // expired in Compactor meanwhile
    }
    return { status: 200, body: {} };
  };
  manager.appendMessage(reply("one"));
  assert.equal(await mirror.settle(2000), true);
  assert.deepEqual(server.seen.slice(1).map((s) => s.method), ["POST", "PUT"]);
});

test("an entry Compactor refuses stops the mirror, said once", async () => {
  const manager = session();
  const mirror = mirrorOf(manager);
  await mirror.sync();
  server.script = () => problem(422, "message_schema");
  manager.appendMessage(reply("one"));
  assert.equal(await mirror.settle(1000), false);
  assert.match(mirror.broken ?? "", /message_schema/);
  assert.equal(await mirror.settle(1000), false);
  assert.deepEqual(said, ["refused"]);
  assert.equal(server.seen.length, 2);  // no retries of a refusal
});

test("Compactor unreachable: settle gives up within its time", async () => {
  const mirror = mirrorOf(session(), await deadUrl());
  const started = Date.now();
  assert.equal(await mirror.settle(500), false);
  assert.ok(Date.now() - started < 1000);
  assert.match(mirror.unreachable ?? "", /ECONNREFUSED/);
});

test("an entry pi appends during a sync waits for the next one, leaf included", async () => {
  const manager = session();
  const mirror = mirrorOf(manager);
  await mirror.sync();
  server.script = (seen) => ({ status: 200, body: {}, delayMs: seen.method === "POST" ? 100 : 0 });
  const sent = manager.appendMessage(reply("one"));
  const syncing = mirror.sync(true);
  await new Promise((r) => setTimeout(r, 30));
  const late = manager.appendMessage({ role: "user", content: "during the sync", timestamp: 5 });
  await syncing;
  // Compactor's leaf stays on what it has; naming `late` there would be a 404
  assert.ok(!server.seen.some((s) => s.path.endsWith("/leaf")));
  assert.equal(mirror.remoteLeaf, sent);
  await mirror.sync(true);
  assert.deepEqual((server.seen.at(-1)?.body as { entries: { id: string }[] }).entries
    .map((e) => e.id), [late]);
  assert.ok(mirror.caughtUp());
});
