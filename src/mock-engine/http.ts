// The mock engine's HTTP plumbing on node:http: request bodies, JSON answers, vLLM's error
// bodies (nested or flat), SSE events with backpressure.
import { once } from "node:events";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError, type ErrorShape } from "./errors.ts";

const MAX_BODY_BYTES = 64 * 1024 * 1024;

export type Headers = Record<string, string>;

export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on("end", () => {
      if (size > MAX_BODY_BYTES)
        reject(new ApiError(413, "Request Entity Too Large", "Request Entity Too Large"));
      else resolve(Buffer.concat(chunks).toString("utf8"));
    });
    req.on("error", reject);
  });
}

export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function retryAfter(seconds: number | null): Headers {
  return seconds === null ? {} : { "retry-after": String(seconds) };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Headers = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

export function sendError(
  res: ServerResponse,
  error: ApiError,
  shape: ErrorShape,
  headers: Headers = {},
): void {
  sendJson(res, error.status, error.body(shape), headers);
}

/** The SSE error event; before 0.10.1 it wrapped the flat body in "error" (approx.). */
export function errorEvent(error: ApiError, shape: ErrorShape): unknown {
  return shape === "flat" ? { error: error.body("flat") } : error.body();
}

export function sseEvent(data: unknown): string {
  return `data: ${JSON.stringify(data)}\n\n`;
}

/** Writes to a stream, waiting for "drain" when the client reads slowly. */
export async function write(res: ServerResponse, text: string, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  // Respect backpressure: a slow reader must not make the mock buffer without bound.
  if (!res.write(text)) await drained(res, signal);
}

/** Resolves when the client has read what was queued on `res`, rejects on `signal`. */
export async function drained(res: ServerResponse, signal: AbortSignal): Promise<void> {
  await once(res, "drain", { signal });
}
