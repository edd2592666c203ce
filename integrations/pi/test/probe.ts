/**
 * A test's probe: pi's own preparation of every compaction (the cut its built-in would make),
 * one JSON line per `session_before_compact` appended to the file PI_PROBE_FILE names. It
 * answers nothing; loaded beside the Compactor extension with another `-e`.
 */
import { appendFileSync } from "node:fs";

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function probe(pi: ExtensionAPI): void {
  const file = process.env["PI_PROBE_FILE"];
  if (!file) return;
  pi.on("session_before_compact", (event) => {
    const p = event.preparation;
    appendFileSync(file, JSON.stringify({
      firstKeptEntryId: p.firstKeptEntryId, isSplitTurn: p.isSplitTurn,
      tokensBefore: p.tokensBefore, summarised: p.messagesToSummarize.length,
      turnPrefix: p.turnPrefixMessages.length,
      leafId: event.branchEntries.at(-1)?.id ?? null }) + "\n");
  });
}
