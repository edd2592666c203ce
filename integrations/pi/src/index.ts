/**
 * Compactor for pi: `pi -e integrations/pi/src/index.ts`, with Compactor's URL (and token) in
 * pi's settings.json under "compactor" or in COMPACTOR_URL (and COMPACTOR_TOKEN): docs/pi.md.
 *
 * It mirrors every entry pi appends into Compactor, asks Compactor for a draft as the context
 * nears the threshold, and answers `session_before_compact` and `session_before_tree` with
 * Compactor's compaction and branch summary, planned with pi's own compaction settings; whenever
 * Compactor cannot answer soundly in time (or no worker is alive), it answers nothing and pi's
 * built-in runs (pi's UI, or the log, says why once per outage). With pi's compaction off it
 * uploads nothing and answers nothing.
 */

import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";

import { agentSettings, type PiSettings } from "./agent.ts";
import { CompactorApi, type AgentSettings } from "./api.ts";
import { Bridge } from "./bridge.ts";
import { fileConfig, readConfig } from "./config.ts";
import { Notices } from "./notices.ts";
import { loadRuntime, type PiRuntime } from "./runtime.ts";

export default function compactor(pi: ExtensionAPI): void {
  const notices = new Notices();
  const say = (cause: string, text: string): void => { notices.say(cause, text); };
  let runtime: PiRuntime | undefined;
  let bridge: Bridge | undefined;
  /** pi 0.73's settings files, read at session start (it has no getSettings()). */
  let fileSettings: PiSettings | undefined;

  const settings = (): PiSettings | undefined =>
    typeof pi.getSettings === "function" ? pi.getSettings() as PiSettings : fileSettings;
  /** pi's effective compaction settings now, or undefined while pi's compaction is off. */
  const agent = (ctx: ExtensionContext): AgentSettings | undefined =>
    runtime ? agentSettings(settings(), ctx.model, runtime.version) : undefined;
  /** The bridge, when the extension is set up and pi's compaction is on. */
  const active = (ctx: ExtensionContext): { bridge: Bridge; agent: AgentSettings } | undefined => {
    const settingsNow = bridge ? agent(ctx) : undefined;
    return bridge && settingsNow ? { bridge, agent: settingsNow } : undefined;
  };

  // After these pi may have appended entries: each schedules a mirror sync, which copies
  // whatever is new (entries without an event of their own, custom ones, labels, go along).
  const mirrorSoon = (_event: unknown, ctx: ExtensionContext): void => {
    active(ctx)?.bridge.activity(ctx.sessionManager);
  };
  pi.on("session_start", async (event, ctx) => {
    notices.ui = ctx.hasUI ? ctx.ui : undefined;
    runtime ??= await loadRuntime();
    if (typeof pi.getSettings !== "function") fileSettings = runtime.readSettings(ctx.cwd);
    bridge ??= setUp(runtime, settings(), say);
    if (bridge && !agent(ctx)) {
      say("disabled", "pi's compaction is off (compaction.enabled): Compactor is not used");
    }
    mirrorSoon(event, ctx);
  });
  pi.on("message_end", mirrorSoon);
  pi.on("model_select", mirrorSoon);
  pi.on("thinking_level_select", mirrorSoon);
  pi.on("session_info_changed", mirrorSoon);
  pi.on("session_tree", mirrorSoon);
  pi.on("agent_settled", mirrorSoon);
  pi.on("session_compact", (event, ctx) => {
    bridge?.compacted();
    mirrorSoon(event, ctx);
  });
  const afterTurn = (_event: unknown, ctx: ExtensionContext): void => {
    const on = active(ctx);
    if (!on) return;
    on.bridge.activity(ctx.sessionManager);
    const usage = ctx.getContextUsage();
    on.bridge.precompute(ctx.sessionManager, usage?.tokens, on.agent,
                         usage?.contextWindow ?? ctx.model?.contextWindow);
  };
  pi.on("turn_end", afterTurn);
  pi.on("agent_end", afterTurn);
  pi.on("session_before_compact", (event, ctx) => {
    const on = active(ctx);
    return on?.bridge.compact(ctx.sessionManager, event, ctx.getContextUsage()?.contextWindow
                              ?? ctx.model?.contextWindow, on.agent);
  });
  pi.on("session_before_tree", (event, ctx) => {
    const on = active(ctx);
    return on?.bridge.tree(ctx.sessionManager, event, on.agent);
  });
  // Quitting: give the last entries a moment to reach Compactor.
  pi.on("session_shutdown", async (_event, ctx) => {
    await active(ctx)?.bridge.flush(ctx.sessionManager, 1000);
  });
}

/** The bridge to the Compactor the environment and pi's settings name, or none (said why). */
function setUp(runtime: PiRuntime, settings: PiSettings | undefined,
               say: (cause: string, text: string) => void): Bridge | undefined {
  const config = readConfig(process.env, fileConfig(settings));
  if (typeof config === "string") {
    say("off", `${config}: the extension is off, pi compacts by itself`);
    return undefined;
  }
  const api = new CompactorApi(config.url, config.token, config.requestTimeoutMs);
  return new Bridge(api, config, say, runtime.estimateAfter);
}
