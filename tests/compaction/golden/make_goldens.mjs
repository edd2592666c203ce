// Builds the golden summary requests of tests/compaction/test_summary_formats.py with the real pi
// (run with Node 22):  node make_goldens.mjs <pi package dir> <input.json>  > <format>.json
// pi's own exported compact() and generateBranchSummary() run against a loopback
// OpenAI-compatible server started here; each request they send is recorded (system prompt, user
// message, max_tokens) and printed as JSON, keyed by scenario and call.
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [, , packageDir, inputPath] = process.argv;
const pi = await import(pathToFileURL(path.join(packageDir, "dist", "index.js")).href);
const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
const seen = [];

function sse(res, text) {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const chunk = (delta, finish) => ({
    id: "golden", object: "chat.completion.chunk", created: 0, model: "golden",
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  res.write(`data: ${JSON.stringify(chunk({ role: "assistant", content: text }, null))}\n\n`);
  const last = { ...chunk({}, "stop"), usage: { prompt_tokens: 1, completion_tokens: 1 } };
  res.write(`data: ${JSON.stringify(last)}\n\n`);
  res.end("data: [DONE]\n\n");
}

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (part) => { body += part; });
  req.on("end", () => {
    const json = JSON.parse(body);
    const text = (m) => (typeof m.content === "string" ? m.content
      : m.content.filter((b) => b.type === "text").map((b) => b.text).join(""));
    const system = json.messages.filter((m) => m.role === "system" || m.role === "developer");
    const user = json.messages.filter((m) => m.role === "user");
    seen.push({
      system: system.map(text).join("\n"),
      user: user.map(text).join("\n"),
      max_tokens: json.max_tokens ?? json.max_completion_tokens ?? null,
    });
    sse(res, `summary ${seen.length}`);
  });
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const model = {
  id: "golden", name: "golden", api: "openai-completions", provider: "golden",
  baseUrl: `http://127.0.0.1:${server.address().port}/v1`, reasoning: false, input: ["text"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: input.modelContextWindow, maxTokens: input.modelMaxTokens,
  compat: { maxTokensField: "max_tokens" },
};
const fileOps = {
  read: new Set(["src/parse.py"]), written: new Set(), edited: new Set(["src/parse.py"]),
};
const settings = { enabled: true, reserveTokens: input.reserveTokens, keepRecentTokens: 1 };

// One call at a time, so the order of the recorded requests is the order of the calls.
async function calls(run) {
  const from = seen.length;
  await run();
  return seen.slice(from);
}
function split(previousSummary) {
  return {
    firstKeptEntryId: "kept", messagesToSummarize: input.history, turnPrefixMessages: input.prefix,
    isSplitTurn: true, tokensBefore: 1000, previousSummary, fileOps, settings,
  };
}
const out = {};
for (const [name, previous, instructions] of [
  ["initial", undefined, undefined],
  ["update_with_focus", input.previousSummary, input.instructions],
]) {
  const recorded = await calls(() => pi.compact(split(previous), model, "key", undefined,
                                                instructions));
  // pi 0.73 starts both calls at once; the prompts tell which is which.
  const prefix = recorded.find((r) => r.user.includes("## Original Request"));
  out[name] = { history: recorded.find((r) => r !== prefix), turn_prefix: prefix };
}
for (const [name, customInstructions] of [["branch", undefined],
                                          ["branch_with_focus", input.instructions]]) {
  const [branch] = await calls(() => pi.generateBranchSummary(input.branch, {
    model, apiKey: "key", signal: new AbortController().signal, customInstructions,
    reserveTokens: input.reserveTokens,
  }));
  out[name] = { branch };
}
server.close();
process.stdout.write(`${JSON.stringify(out, null, 1)}\n`);
