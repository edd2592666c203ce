/**
 * Compactor for pi: `pi -e integrations/pi/src/index.ts --approve`, with COMPACTOR_URL (and
 * COMPACTOR_TOKEN) naming a `compactor serve`.
 *
 * It mirrors every entry pi appends into Compactor, asks Compactor for a draft as the context
 * nears the threshold, and answers `session_before_compact` and `session_before_tree` with
 * Compactor's compaction and branch summary; whenever Compactor cannot answer soundly in time,
 * it answers nothing and pi's built-in runs (the log says why, once).
 */

import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";

import { CompactorApi } from "./api.ts";
import { Bridge } from "./bridge.ts";
import { readConfig } from "./config.ts";
import { Notices } from "./notices.ts";
import { limitsFor, type CompactionSettings, type Limits } from "./precompute.ts";

export default function compactor(pi: ExtensionAPI): void {
  const notices = new Notices();
  const config = readConfig(process.env);
  if (typeof config === "string") {
    notices.say("off", `${config}: the extension is off, pi compacts by itself`);
    return;
  }
  const api = new CompactorApi(config.url, config.token, config.requestTimeoutMs);
  const bridge = new Bridge(api, config, (cause, text) => notices.say(cause, text));

  // After these pi may have appended entries: each schedules a mirror sync, which copies
  // whatever is new (entries without an event of their own, custom ones, labels, go along).
  const mirrorSoon = (_event: unknown, ctx: ExtensionContext): void => {
    bridge.activity(ctx.sessionManager);
  };
  pi.on("session_start", (event, ctx) => {
    notices.ui = ctx.mode === "tui" && ctx.hasUI ? ctx.ui : undefined;
    mirrorSoon(event, ctx);
  });
  pi.on("message_end", mirrorSoon);
  pi.on("model_select", mirrorSoon);
  pi.on("thinking_level_select", mirrorSoon);
  pi.on("session_info_changed", mirrorSoon);
  pi.on("session_tree", mirrorSoon);
  pi.on("agent_settled", mirrorSoon);
  pi.on("session_compact", (event, ctx) => {
    bridge.compacted();
    mirrorSoon(event, ctx);
  });
  const afterTurn = (_event: unknown, ctx: ExtensionContext): void => {
    bridge.activity(ctx.sessionManager);
    bridge.precompute(ctx.sessionManager, ctx.getContextUsage()?.tokens, limits(pi, ctx));
  };
  pi.on("turn_end", afterTurn);
  pi.on("agent_end", afterTurn);
  pi.on("session_before_compact", (event, ctx) =>
    bridge.compact(ctx.sessionManager, event, ctx.getContextUsage()?.contextWindow
                   ?? ctx.model?.contextWindow));
  pi.on("session_before_tree", (event, ctx) => bridge.tree(ctx.sessionManager, event));
  // Quitting: give the last entries a moment to reach Compactor.
  pi.on("session_shutdown", (_event, ctx) => bridge.flush(ctx.sessionManager, 1000));
}

function limits(pi: ExtensionAPI, ctx: ExtensionContext): Limits | undefined {
  const window = ctx.getContextUsage()?.contextWindow ?? ctx.model?.contextWindow;
  if (!window || !ctx.model) return undefined;
  // pi 0.73 has no getSettings(): its defaults then.
  const all = typeof pi.getSettings === "function" ? pi.getSettings() : undefined;
  const settings = all?.compaction as CompactionSettings | undefined;
  return limitsFor(settings, `${ctx.model.provider}/${ctx.model.id}`, window);
}
