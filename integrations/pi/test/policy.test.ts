/** The pure parts: settings, when to precompute, the mirror's steps, saying things once. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { readConfig } from "../src/config.ts";
import { BATCH, mirrorSteps, UNKNOWN, type EntryLike } from "../src/mirror.ts";
import { Notices } from "../src/notices.ts";
import { band, limitsFor, precomputeDue } from "../src/precompute.ts";

describe("readConfig", () => {
  test("off without COMPACTOR_URL, or with one that is not http(s)", () => {
    assert.match(readConfig({}) as string, /^COMPACTOR_URL is not set/);
    assert.match(readConfig({ COMPACTOR_URL: "localhost:8080" }) as string, /not an http/);
  });

  test("defaults, and the tuning variables in seconds", () => {
    assert.deepEqual(readConfig({ COMPACTOR_URL: "http://h:8080/", COMPACTOR_TOKEN: "t" }), {
      url: "http://h:8080", token: "t", timeoutMs: 90_000, syncTimeoutMs: 3000,
      requestTimeoutMs: 10_000, precompute: true });
    const tuned = readConfig({ COMPACTOR_URL: "https://h", COMPACTOR_PI_TIMEOUT_S: "2.5",
                               COMPACTOR_PI_PRECOMPUTE: "off" });
    assert.equal(typeof tuned === "object" && tuned.timeoutMs, 2500);
    assert.equal(typeof tuned === "object" && tuned.precompute, false);
    assert.match(readConfig({ COMPACTOR_URL: "http://h", COMPACTOR_PI_TIMEOUT_S: "0" }) as string,
                 /COMPACTOR_PI_TIMEOUT_S=0/);
  });
});

describe("precompute", () => {
  // threshold = window - reserve; band = clamp(0.125 x threshold, 8 192, 32 000)
  const cases: [number, number][] = [[24_000, 8_192], [183_616, 22_952], [400_000, 32_000]];
  for (const [threshold, width] of cases) {
    test(`band below ${threshold} is ${width}`, () => assert.equal(band(threshold), width));
  }

  const limits = { contextWindow: 32_000, reserveTokens: 8_000, keepRecentTokens: 6_000 };
  // tokens, last asked at, due?   (band: 15 808 < tokens <= 24 000; one draft a turn in it)
  const due: [number, number | undefined, boolean][] = [
    [15_808, undefined, false], [15_809, undefined, true], [24_000, undefined, true],
    [24_001, undefined, false], [16_001, 16_000, true], [19_000, 16_000, true],
    [20_000, 20_000, false],  // the same state (turn_end, then agent_end): asked already
    [19_000, 20_000, false],  // smaller than when last asked: not a later state
    [24_001, 20_000, false]];  // over the threshold: pi compacts now, the job plans it
  for (const [tokens, last, expected] of due) {
    test(`${tokens} tokens, last asked at ${last}: ${expected}`, () => {
      assert.equal(precomputeDue(tokens, limits, last), expected);
    });
  }

  test("the limits of pi's settings (compaction off: none)", () => {
    assert.deepEqual(limitsFor({}, 200_000),
                     { contextWindow: 200_000, reserveTokens: 16_384, keepRecentTokens: 20_000 });
    assert.deepEqual(limitsFor({ reserveTokens: 1000, keepRecentTokens: 7 }, 50),
                     { contextWindow: 50, reserveTokens: 1000, keepRecentTokens: 7 });
    assert.equal(limitsFor(undefined, 50), undefined);
  });
});

describe("mirrorSteps", () => {
  const e = (id: string, parentId: string | null): EntryLike => ({ id, parentId, type: "message" });

  test("a chain under the leaf is one append", () => {
    assert.deepEqual(mirrorSteps([e("b", "a"), e("c", "b")], "a"),
                     [{ kind: "append", entries: [e("b", "a"), e("c", "b")] }]);
  });

  test("an entry under another parent moves the leaf first", () => {
    // pi navigated back to a, or Compactor appended x under c itself
    assert.deepEqual(mirrorSteps([e("c", "b"), e("d", "a"), e("y", "d")], "b"), [
      { kind: "append", entries: [e("c", "b")] },
      { kind: "leaf", leafId: "a" },
      { kind: "append", entries: [e("d", "a"), e("y", "d")] }]);
    assert.deepEqual(mirrorSteps([e("y", "c")], "x"),
                     [{ kind: "leaf", leafId: "c" }, { kind: "append", entries: [e("y", "c")] }]);
  });

  test("an unknown leaf is set before appending; a root resets it", () => {
    assert.deepEqual(mirrorSteps([e("y", "c")], UNKNOWN)[0], { kind: "leaf", leafId: "c" });
    assert.deepEqual(mirrorSteps([e("r", null)], "c")[0], { kind: "leaf", leafId: null });
  });

  test("a long backlog goes in bounded batches", () => {
    const chain = Array.from({ length: 7 }, (_, i) => e(`n${i + 1}`, `n${i}`));
    const steps = mirrorSteps(chain, "n0", { ...BATCH, entries: 3 });
    assert.deepEqual(steps.map((s) => s.kind === "append" ? s.entries.length : 0), [3, 3, 1]);
    const big = mirrorSteps(chain, "n0", { entries: 100, bytes: 100 });
    assert.ok(big.length > 1 && big.every((s) => s.kind === "append"));
  });
});

test("Notices say each cause once", () => {
  const lines: string[] = [];
  const notices = new Notices((line) => lines.push(line));
  assert.equal(notices.say("unreachable", "down"), true);
  assert.equal(notices.say("unreachable", "still down"), false);
  notices.say("timeout", "slow");
  assert.deepEqual(lines, ["[compactor] down\n", "[compactor] slow\n"]);
});
