/** pi's settings as the extension reads them: the `agent` object, the `compactor` key, notices
 * per outage, and the judgement of an answer (a cut that keeps everything, pi's Usage). */
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";

import { agentSettings, summaryFormat } from "../src/agent.ts";
import { piUsage, summarisedBefore } from "../src/answer.ts";
import { fileConfig, readConfig } from "../src/config.ts";
import { Notices, RECOVERED } from "../src/notices.ts";
import { deepMerge, settingsReader, type PiModule } from "../src/runtime.ts";

const MODEL = { provider: "loop", id: "m", maxTokens: 4000 };

describe("agentSettings", () => {
  test("pi 1.6: its settings with the model's overrides, max_tokens the model's limit", () => {
    const settings = { compaction: { reserveTokens: 4000, keepRecentTokens: 3000,
                                     modelOverrides: { "loop/m": { keepRecentTokens: 2500 },
                                                       "other/x": { reserveTokens: 9 } } },
                       branchSummary: { reserveTokens: 5000 } };
    assert.deepEqual(agentSettings(settings, MODEL, "1.6.0"), {
      reserveTokens: 4000, keepRecentTokens: 2500, tokenizer: "estimate",
      summaryFormat: "pi-1.6", summaryMaxTokens: 4000, turnPrefixMaxTokens: 4000,
      branchReserveTokens: 5000 });
  });

  test("pi 0.73: no overrides, max_tokens 0.8 and 0.5 of the reserve; pi's defaults", () => {
    const settings = { compaction: { reserveTokens: 4000, keepRecentTokens: 3000,
                                     modelOverrides: { "loop/m": { keepRecentTokens: 1 } } } };
    assert.deepEqual(agentSettings(settings, MODEL, "0.73.1"), {
      reserveTokens: 4000, keepRecentTokens: 3000, tokenizer: "estimate",
      summaryFormat: "pi-0.73", summaryMaxTokens: 3200, turnPrefixMaxTokens: 2000,
      branchReserveTokens: 16_384 });
    assert.deepEqual(agentSettings(undefined, undefined, "1.6.0"), {
      reserveTokens: 16_384, keepRecentTokens: 20_000, tokenizer: "estimate",
      summaryFormat: "pi-1.6", branchReserveTokens: 16_384 });
  });

  test("compaction off: nothing; the version's format", () => {
    assert.equal(agentSettings({ compaction: { enabled: false } }, MODEL, "1.6.0"), undefined);
    assert.deepEqual(["0.73.1", "0.9.0", "1.6.0", "2.0.0"].map(summaryFormat),
                     ["pi-0.73", "pi-0.73", "pi-1.6", "pi-1.6"]);
  });
});

describe("the compactor key of pi's settings", () => {
  test("the file names the service; the environment wins", () => {
    const file = fileConfig({ compactor: { url: "http://file:1/", token: "ft", timeoutS: 5,
                                           precompute: false } });
    const fromFile = readConfig({}, file);
    assert.deepEqual(fromFile, { url: "http://file:1", token: "ft", timeoutMs: 5000,
                                 syncTimeoutMs: 3000, requestTimeoutMs: 10_000,
                                 precompute: false });
    const env = { COMPACTOR_URL: "http://env:2", COMPACTOR_PI_TIMEOUT_S: "7" };
    assert.deepEqual(readConfig(env, file), { url: "http://env:2", token: "ft",
                                              timeoutMs: 7000, syncTimeoutMs: 3000,
                                              requestTimeoutMs: 10_000, precompute: false });
    const bad = readConfig({}, fileConfig({ compactor: { url: "http://h", timeoutS: -1 } }));
    assert.match(String(bad), /compactor\.timeoutS=-1/);
    assert.deepEqual(fileConfig({ compactor: "http://h" }), {});
  });

  test("pi 0.73: its settings manager reads the files, the project's over the global", async () => {
    const home = mkdtempSync(join(tmpdir(), "pi-settings-"));
    mkdirSync(join(home, "agent"));
    mkdirSync(join(home, "work", ".pi"), { recursive: true });
    const global = { compactor: { url: "http://g", token: "g" }, compaction: { reserveTokens: 1 } };
    writeFileSync(join(home, "agent", "settings.json"), JSON.stringify(global));
    writeFileSync(join(home, "work", ".pi", "settings.json"),
                  JSON.stringify({ compactor: { url: "http://p" } }));
    const before = process.env["PI_CODING_AGENT_DIR"];
    process.env["PI_CODING_AGENT_DIR"] = join(home, "agent");
    try {
      const pi073 = (await import("pi-073")) as PiModule;
      assert.deepEqual(settingsReader(pi073)(join(home, "work")), {
        compactor: { url: "http://p", token: "g" }, compaction: { reserveTokens: 1 } });
    } finally {
      if (before === undefined) delete process.env["PI_CODING_AGENT_DIR"];
      else process.env["PI_CODING_AGENT_DIR"] = before;
    }
    assert.deepEqual(deepMerge({ a: { b: 1, c: [1] } }, { a: { c: [2] }, d: undefined }),
                     { a: { b: 1, c: [2] } });
  });
});

test("Notices: once per outage, said again after a recovery", () => {
  const lines: string[] = [];
  const notices = new Notices((line) => lines.push(line));
  assert.equal(notices.say("off", "no URL"), true);
  assert.equal(notices.say("unreachable", "down"), true);
  assert.equal(notices.say("unreachable", "still down"), false);
  assert.equal(notices.say(RECOVERED, "back"), true);
  assert.equal(notices.say(RECOVERED, "back"), false);  // nothing to recover from
  assert.equal(notices.say("unreachable", "down again"), true);
  assert.equal(notices.say("off", "no URL"), false);  // a set-up cause stays said
  assert.deepEqual(lines, ["[compactor] no URL\n", "[compactor] down\n", "[compactor] back\n",
                           "[compactor] down again\n"]);
  const shown: [string, string | undefined][] = [];
  notices.ui = { notify: (message, type) => { shown.push([message, type]); } };
  notices.say("timeout", "slow");
  assert.deepEqual(shown, [["Compactor: slow", "warning"]]);
});

describe("an answer's cut", () => {
  const branch = [
    { id: "mc", type: "model_change" }, { id: "u1", type: "message" },
    { id: "a1", type: "message" }, { id: "u2", type: "message" },
    { id: "c1", type: "compaction", firstKeptEntryId: "a1" },
    { id: "u3", type: "message" }, { id: "a3", type: "message" }];

  test("counts what it summarises in pi's context after the latest compaction", () => {
    // context: a1 u2 (the kept tail) u3 a3
    assert.equal(summarisedBefore(branch, "a1"), 0);
    assert.equal(summarisedBefore(branch, "u3"), 2);
    assert.equal(summarisedBefore(branch, "a3"), 3);
    assert.equal(summarisedBefore(branch, "u1"), undefined);  // summarised already
    assert.equal(summarisedBefore(branch, "elsewhere"), undefined);
  });

  test("the first entry keeps everything (pi 0.73.1's 'No prior history.' draft)", () => {
    const fresh = branch.slice(0, 4);
    assert.equal(summarisedBefore(fresh, "mc"), 0);
    assert.equal(summarisedBefore(fresh, "u1"), 0);
    assert.equal(summarisedBefore(fresh, "u2"), 2);
  });
});

test("pi's Usage from the job record: its calls and its drafts'", () => {
  assert.equal(piUsage({}), undefined);
  assert.deepEqual(piUsage({ usage: { input: 100, output: 20 },
                             draftUsage: { input: 50, output: 10, cacheRead: 5 },
                             costUsd: 0.5, draftCostUsd: 0.25 }), {
    input: 150, output: 30, cacheRead: 5, cacheWrite: 0, totalTokens: 185,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0.75 } });
});
