/**
 * The extension's settings: the `compactor` key of pi's settings files (docs/pi.md), under the
 * environment, which wins. `COMPACTOR_URL` and `COMPACTOR_TOKEN` name the service; the
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

/** The `compactor` key of pi's settings.json, each field the twin of an environment variable. */
export interface FileConfig {
  url?: unknown;            // COMPACTOR_URL
  token?: unknown;          // COMPACTOR_TOKEN
  timeoutS?: unknown;       // COMPACTOR_PI_TIMEOUT_S
  syncTimeoutS?: unknown;   // COMPACTOR_PI_SYNC_TIMEOUT_S
  requestTimeoutS?: unknown;  // COMPACTOR_PI_REQUEST_TIMEOUT_S
  precompute?: unknown;     // COMPACTOR_PI_PRECOMPUTE
}

const FILE_KEYS: Record<string, keyof FileConfig> = {
  COMPACTOR_URL: "url", COMPACTOR_TOKEN: "token", COMPACTOR_PI_TIMEOUT_S: "timeoutS",
  COMPACTOR_PI_SYNC_TIMEOUT_S: "syncTimeoutS", COMPACTOR_PI_REQUEST_TIMEOUT_S: "requestTimeoutS",
  COMPACTOR_PI_PRECOMPUTE: "precompute",
};

/** The environment over the settings file: one value per variable name, and where it came
 * from (for a message naming what to fix). */
function merged(env: Env, file: FileConfig): { values: Env; names: Record<string, string> } {
  const values: Record<string, string | undefined> = {};
  const names: Record<string, string> = {};
  for (const [name, key] of Object.entries(FILE_KEYS)) {
    const fromEnv = env[name]?.trim();
    const fromFile = file[key];
    if (fromEnv) {
      values[name] = fromEnv;
      names[name] = name;
    } else if (fromFile !== undefined && fromFile !== null) {
      values[name] = String(fromFile).trim();
      names[name] = `settings.json compactor.${key}`;
    }
  }
  return { values, names };
}

function seconds(env: Env, names: Record<string, string>, name: string,
                 fallback: number): number {
  const raw = env[name];
  if (!raw) return fallback * 1000;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) {
    throw new Error(`${names[name] ?? name}=${raw}: give a number of seconds above 0`);
  }
  return value * 1000;
}

function flag(env: Env, names: Record<string, string>, name: string,
              fallback: boolean): boolean {
  const raw = env[name]?.toLowerCase();
  if (!raw) return fallback;
  if (["1", "true", "yes", "on"].includes(raw)) return true;
  if (["0", "false", "no", "off"].includes(raw)) return false;
  throw new Error(`${names[name] ?? name}=${raw}: give true or false`);
}

/** The `compactor` object of pi's merged settings (anything else: none). */
export function fileConfig(settings: unknown): FileConfig {
  const value = (settings as { compactor?: unknown } | undefined)?.compactor;
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? value as FileConfig : {};
}

/** The settings, or the reason the extension stays off (pi then compacts by itself). */
export function readConfig(env: Env, file: FileConfig = {}): Config | string {
  const { values, names } = merged(env, file);
  const url = values["COMPACTOR_URL"];
  if (!url) return "COMPACTOR_URL is not set (nor compactor.url in pi's settings.json)";
  const urlName = names["COMPACTOR_URL"] ?? "COMPACTOR_URL";
  if (!/^https?:\/\//.test(url)) return `${urlName}=${url} is not an http(s) URL`;
  try {
    return {
      url: url.replace(/\/+$/, ""),
      token: values["COMPACTOR_TOKEN"] || undefined,
      timeoutMs: seconds(values, names, "COMPACTOR_PI_TIMEOUT_S", 90),
      syncTimeoutMs: seconds(values, names, "COMPACTOR_PI_SYNC_TIMEOUT_S", 3),
      requestTimeoutMs: seconds(values, names, "COMPACTOR_PI_REQUEST_TIMEOUT_S", 10),
      precompute: flag(values, names, "COMPACTOR_PI_PRECOMPUTE", true),
    };
  } catch (err) {
    return (err as Error).message;
  }
}
