/**
 * bench/bench_pi.py's probe: loaded by pi before the Compactor extension, it writes pi's own
 * preparation of each compaction (the cut pi would make) to the file named by
 * BENCH_PI_PROBE, one JSON line each, and answers nothing, so the next handler decides.
 * Type-free on purpose: pi 1.6 and 0.73 load it alike.
 */
import { appendFileSync } from "node:fs";

export default function probe(pi: any): void {
  pi.on("session_before_compact", (event: any) => {
    const file = process.env["BENCH_PI_PROBE"];
    const preparation = event?.preparation;
    if (file && preparation) {
      appendFileSync(file, JSON.stringify({
        reason: event.reason ?? null,
        firstKeptEntryId: preparation.firstKeptEntryId,
        isSplitTurn: preparation.isSplitTurn,
        tokensBefore: preparation.tokensBefore,
      }) + "\n");
    }
    return undefined;
  });
}
