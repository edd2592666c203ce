/**
 * What the extension tells the user: each cause once per pi process (a Compactor that is down
 * stays down for many turns; one line says so, not one per turn). Lines go to pi's log, stderr
 * (stdout carries the RPC protocol), or to a notification in the TUI, whose screen stderr would
 * scribble over.
 */

export interface Notify {
  notify(message: string, type?: "info" | "warning" | "error"): void;
}

export class Notices {
  /** The TUI's notifications, when pi runs one. */
  ui: Notify | undefined;
  private readonly said = new Set<string>();
  private readonly write: (line: string) => void;

  constructor(write: (line: string) => void = (line) => process.stderr.write(line)) {
    this.write = write;
  }

  /** Say `text` unless something was said for `cause` already; true when it was said now. */
  say(cause: string, text: string): boolean {
    if (this.said.has(cause)) return false;
    this.said.add(cause);
    if (this.ui) this.ui.notify(`Compactor: ${text}`, "warning");
    else this.write(`[compactor] ${text}\n`);
    return true;
  }
}
