/**
 * A stand-in for `compactor serve` in the unit tests: a real HTTP server on loopback whose
 * answers a test scripts per request (the end-to-end test, tests/runtime/test_runtime_pi.py,
 * runs the real one). Every request is recorded.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Seen {
  method: string;
  path: string;
  body: unknown;
  auth: string | undefined;
}

export interface Answer {
  status: number;
  body?: unknown;
  delayMs?: number;
}

export type Script = (request: Seen) => Answer | Promise<Answer>;

export interface StandIn {
  url: string;
  seen: Seen[];
  script: Script;
  close(): Promise<void>;
}

async function read(request: IncomingMessage): Promise<unknown> {
  let text = "";
  for await (const chunk of request) text += String(chunk);
  if (!text) return undefined;
  const json = request.headers["content-type"]?.startsWith("application/json");
  return json ? JSON.parse(text) : text;
}

/** Answers 200 `{}` until a test sets `script`. */
export async function standIn(): Promise<StandIn> {
  const state: StandIn = {
    url: "", seen: [], script: () => ({ status: 200, body: {} }),
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
  const server: Server = createServer((request, response) => {
    void (async () => {
      const seen: Seen = { method: request.method ?? "", path: request.url ?? "",
                           body: await read(request), auth: request.headers.authorization };
      state.seen.push(seen);
      const answer = await state.script(seen);
      if (answer.delayMs) await new Promise((r) => setTimeout(r, answer.delayMs));
      const problem = answer.status >= 400;
      response.writeHead(answer.status, {
        "content-type": problem ? "application/problem+json" : "application/json" });
      response.end(answer.body === undefined ? "" : JSON.stringify(answer.body));
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

export function problem(status: number, code: string): Answer {
  return { status, body: { type: `urn:compactor:problem:${code}`, title: "", status, code,
                           detail: `a ${code}` } };
}

/** A closed port: connecting is refused at once. */
export async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}
