// The real pi's own compaction preparation, for tests/compaction/test_pi_cut.py.
// Usage: node pi_prepare_probe.mjs <pi package dir>  (stdin: JSON, stdout: JSON)
// stdin: {"cases": [{"jsonl": "<a v3 session file>", "leafIds": [...],
//                    "keepRecentTokens": n, "reserveTokens": n}]}
// stdout: [[{firstKeptEntryId, isSplitTurn, summarize: [entry ids], prefix: [entry ids]} | null
//           per leaf] per case]
// For each leaf: the branch root→leaf as pi's SessionManager.getBranch() gives it, then pi's own
// prepareCompaction(branch, settings) (the function its threshold, overflow and manual
// compactions call), its messages mapped back to the entries they came from.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const pkg = process.argv[2];
const url = (rel) => pathToFileURL(join(pkg, "dist", rel)).href;
const { prepareCompaction } = await import(url("core/compaction/compaction.js"));
const { parseSessionEntries, migrateSessionEntries } = await import(url("core/session-manager.js"));

function branch(entries, leafId) {
  const byId = new Map(entries.filter((e) => e.type !== "session").map((e) => [e.id, e]));
  const path = [];
  for (let entry = byId.get(leafId); entry; entry = byId.get(entry.parentId)) path.unshift(entry);
  return path;
}

function sourceOf(path) {
  const byMessage = new Map();
  const byTime = new Map();
  for (const entry of path) {
    if (entry.type === "message") byMessage.set(entry.message, entry.id);
    const time = new Date(entry.timestamp).getTime();
    if (entry.type !== "message" && !byTime.has(time)) byTime.set(time, entry.id);
  }
  return (message) => {
    const id = byMessage.get(message);
    if (id !== undefined) return id;
    const match = path.find((e) => e.type === "message" && e.message.role === message.role
      && e.message.timestamp === message.timestamp
      && JSON.stringify(e.message.content) === JSON.stringify(message.content));
    if (match) return match.id;
    const time = typeof message.timestamp === "number" ? message.timestamp
      : new Date(message.timestamp).getTime();
    return byTime.get(time) ?? `?${message.role}`;
  };
}

const input = JSON.parse(readFileSync(0, "utf8"));
const out = input.cases.map((c) => {
  const entries = parseSessionEntries(c.jsonl);
  migrateSessionEntries(entries);
  const settings = { enabled: true, reserveTokens: c.reserveTokens,
                     keepRecentTokens: c.keepRecentTokens };
  return c.leafIds.map((leafId) => {
    const path = branch(entries, leafId);
    const prep = prepareCompaction(path, settings);
    if (!prep) return null;
    const id = sourceOf(path);
    return { firstKeptEntryId: prep.firstKeptEntryId, isSplitTurn: prep.isSplitTurn,
             summarize: prep.messagesToSummarize.map(id), prefix: prep.turnPrefixMessages.map(id) };
  });
});
process.stdout.write(JSON.stringify(out));
