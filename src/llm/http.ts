// JSON over HTTP for inference engines. The `openai` SDK drops the message of vLLM's older
// flat error body ({"object":"error","message":…}: it reads only body.error), and token mode
// needs routes it does not cover (/tokenize, llama.cpp's /completion), so engine requests go
// through this small fetch wrapper instead.
import { deadline } from "./deadline.ts";

/** An engine request that did not produce a usable answer. */
export class EngineError extends Error {
  /** HTTP status, or null when no response arrived (connection refused/reset, timeout). */
  readonly status: number | null;
  /** Seconds the server asked us to wait (Retry-After), when it said. */
  readonly retryAfterS: number | null;
  private readonly fault: boolean | undefined;
  constructor(
    message: string,
    status: number | null,
    retryAfterS: number | null = null,
    replicaFault?: boolean,
  ) {
    super(message);
    this.name = "EngineError";
    this.status = status;
    this.retryAfterS = retryAfterS;
    this.fault = replicaFault;
  }

  /** Worth another attempt: no answer, a timeout, 408/409/429 or a 5xx. */
  get retryable(): boolean {
    const s = this.status;
    return s === null || s === 408 || s === 409 || s === 429 || s >= 500;
  }

  /** Counts toward taking the replica out: no answer or a 5xx, unless said otherwise (aborts). */
  get replicaFault(): boolean {
    return this.fault ?? (this.status === null || this.status >= 500);
  }
}

export interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs: number;
  headers?: Record<string, string>;
}

/** Seconds from a Retry-After header: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, (date - now) / 1000);
}

/** The message of an error body in vLLM's current (`{"error":{…}}`) or older flat shape, or llama.cpp's. */
export function errorMessage(body: unknown, fallback: string): string {
  if (typeof body !== "object" || body === null) return fallback;
  const record = body as Record<string, unknown>;
  const inner =
    typeof record.error === "object" && record.error !== null
      ? (record.error as Record<string, unknown>)
      : record;
  const message = inner.message ?? (typeof record.error === "string" ? record.error : undefined);
  if (typeof message === "string" && message !== "") return message;
  if (message !== undefined) return JSON.stringify(message);
  // FastAPI's own validation errors: {"detail": …}
  if (record.detail !== undefined)
    return typeof record.detail === "string" ? record.detail : JSON.stringify(record.detail);
  return fallback;
}

function describeCause(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
  const code = (cause as { code?: unknown } | null)?.code;
  const text = cause instanceof Error ? cause.message : String(cause);
  return typeof code === "string" && !text.includes(code) ? `${code}: ${text}` : text;
}

/**
 * Sends one request and returns the parsed JSON body of a 2xx answer. Throws EngineError for
 * anything else; rethrows the caller's abort reason unchanged when `signal` aborts.
 */
export async function requestJson(
  method: "GET" | "POST",
  url: string,
  body: unknown,
  options: RequestOptions,
): Promise<unknown> {
  const limit = deadline(options.timeoutMs, options.signal);
  let response: Response;
  let text: string;
  try {
    response = await fetch(url, {
      method,
      headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...options.headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: limit.signal,
    });
    text = await response.text();
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    if (limit.expired) throw new EngineError(`request timed out after ${options.timeoutMs / 1000} s`, null);
    throw new EngineError(`connection error (${describeCause(error)})`, null);
  } finally {
    limit.dispose();
  }
  let parsed: unknown;
  try {
    parsed = text === "" ? null : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const fallback = text.trim() === "" ? "(no body)" : text.trim().slice(0, 300);
    throw new EngineError(
      `HTTP ${response.status}: ${errorMessage(parsed, fallback)}`,
      response.status,
      parseRetryAfter(response.headers.get("retry-after")),
    );
  }
  if (parsed === undefined)
    throw new EngineError(`HTTP ${response.status}: the body is not JSON (${text.slice(0, 100)})`, 502);
  return parsed;
}
