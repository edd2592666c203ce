/**
 * What the extension tells the user: each cause once per outage (a Compactor that is down stays
 * down for many turns; one line says so, not one per turn), and again in the next outage once
 * Compactor answered in between ({@link RECOVERED}). Lines go to pi's UI where it has one (the
 * TUI's notifications; in RPC mode pi forwards them to the client as `extension_ui_request`
 * "notify"), else to stderr (stdout may carry pi's JSON output).
 */

export interface Notify {
  notify(message: string, type?: "info" | "warning" | "error"): void;
}

/** The cause a report names when Compactor answered soundly: the causes said so far are
 * forgotten (the next outage is said again), and the recovery is said when one was. */
export const RECOVERED = "recovered";

// Causes about the set-up rather than an outage: said once per process.
const STANDING = new Set(["off", "disabled"]);

export class Notices {
  /** pi's UI, when it has one. */
  ui: Notify | undefined;
  private readonly said = new Set<string>();
  private readonly write: (line: string) => void;

  constructor(write: (line: string) => void = (line) => process.stderr.write(line)) {
    this.write = write;
  }

  /** Say `text` unless something was said for `cause` in this outage; true when said now. */
  say(cause: string, text: string): boolean {
    if (cause === RECOVERED) return this.recovered(text);
    if (this.said.has(cause)) return false;
    this.said.add(cause);
    this.emit(text, "warning");
    return true;
  }

  private recovered(text: string): boolean {
    const outage = [...this.said].some((cause) => !STANDING.has(cause));
    if (!outage) return false;
    for (const cause of [...this.said]) if (!STANDING.has(cause)) this.said.delete(cause);
    if (text) this.emit(text, "info");
    return true;
  }

  private emit(text: string, type: "info" | "warning"): void {
    if (this.ui) this.ui.notify(`Compactor: ${text}`, type);
    else this.write(`[compactor] ${text}\n`);
  }
}
