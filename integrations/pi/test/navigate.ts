/**
 * A test's pi command: `/navigate <entryId>` moves to that entry of the session tree and asks
 * for a summary of the branch left behind (what pi's /tree does in the TUI; RPC mode has no
 * tree navigation command). Loaded beside the Compactor extension with a second `-e`.
 */
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function navigate(pi: ExtensionAPI): void {
  pi.registerCommand("navigate", {
    description: "navigate the session tree to an entry, summarizing the branch left",
    handler: async (args, ctx) => {
      const result = await ctx.navigateTree(args.trim(), { summarize: true });
      process.stderr.write(`[navigate] ${JSON.stringify({ cancelled: result.cancelled })}\n`);
    },
  });
}
