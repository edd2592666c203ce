/**
 * Settings from the environment. `COMPACTOR_URL` and `COMPACTOR_TOKEN` name the service; the
 * `COMPACTOR_PI_*` ones tune the extension (a separate prefix: Compactor's own processes read
 * every other `COMPACTOR_*` variable).
 */

export interface Config {
  /** Base URL of `compactor serve`, without a trailing slash. */
  url: string;
  /** Bearer token (one of the server's COMPACTOR_API_TOKENS); none for --insecure-no-auth. */
  token: string | undefined;
  /** Longest a compaction or branch summary waits for Compactor before pi's built-in runs. */
  timeoutMs: number;
  /** Longest a hook waits for the mirror to catch up before pi's built-in runs. */
  syncTimeoutMs: number;
  /** Longest one mirror request may take (a long poll gets its wait on top). */
  requestTimeoutMs: number;
  /** Ask Compactor for a draft when the context nears the threshold. */
  precompute: boolean;
}

export type Env = Readonly<Record<string, string | undefined>>;

function seconds(env: Env, name: string, fallback: number): number {
  const raw = env[name]?.trim();
  if (!raw) return fallback * 1000;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) {
    throw new Error(`${name}=${raw}: give a number of seconds above 0`);
  }
  return value * 1000;
}

function flag(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (!raw) return fallback;
  if (["1", "true", "yes", "on"].includes(raw)) return true;
  if (["0", "false", "no", "off"].includes(raw)) return false;
  throw new Error(`${name}=${raw}: give true or false`);
}

/** The settings, or the reason the extension stays off (pi then compacts by itself). */
export function readConfig(env: Env): Config | string {
  const url = env["COMPACTOR_URL"]?.trim();
  if (!url) return "COMPACTOR_URL is not set";
  if (!/^https?:\/\//.test(url)) return `COMPACTOR_URL=${url} is not an http(s) URL`;
  try {
    return {
      url: url.replace(/\/+$/, ""),
      token: env["COMPACTOR_TOKEN"]?.trim() || undefined,
      timeoutMs: seconds(env, "COMPACTOR_PI_TIMEOUT_S", 90),
      syncTimeoutMs: seconds(env, "COMPACTOR_PI_SYNC_TIMEOUT_S", 3),
      requestTimeoutMs: seconds(env, "COMPACTOR_PI_REQUEST_TIMEOUT_S", 10),
      precompute: flag(env, "COMPACTOR_PI_PRECOMPUTE", true),
    };
  } catch (err) {
    return (err as Error).message;
  }
}
