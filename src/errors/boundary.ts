// What each boundary makes of an error, read from the catalogue by the error's code: the
// WebSocket `error` frame and close, the HTTP status and body, the CLI's exit status.
import type { ErrorFrame } from "../../protocol/messages.ts";
import { CATALOGUE, type CatalogueEntry, type Code, isCode, type RollgymError } from "./catalogue.ts";

/**
 * The catalogue code an error carries, or null for one the catalogue does not know (a bug).
 * Read from `code`, so errors of layers that import nothing of ours (envs/) can carry one too.
 */
export function codeOf(error: unknown): Code | null {
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && isCode(code) ? code : null;
}

/**
 * Whether `error` refuses the input: it carries a code, and not one of work that failed below
 * (an engine, a remote env: the entries with exit status 1).
 */
export function isRefusal(error: unknown): boolean {
  const code = codeOf(error);
  return code !== null && entryOf(code).exit !== 1;
}

/**
 * `error` with what it is about (a flag, a command, stdin) before its message, when it carries
 * `code`; its code, and so what each boundary makes of it, stays. Anything else as it is.
 */
export function inContext(error: unknown, code: Code, context: string): unknown {
  if (codeOf(error) === code) (error as Error).message = `${context}: ${(error as Error).message}`;
  return error;
}

/** An error's message; anything else thrown, as a string. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function entryOf(code: Code): CatalogueEntry<never> {
  return CATALOGUE[code] as CatalogueEntry<never>;
}

/** The exit status of a command that failed with `error`, or null when it is a bug (thrown on). */
export function exitStatus(error: unknown): number | null {
  const code = codeOf(error);
  return code === null ? null : (entryOf(code).exit ?? null);
}

/** What an `error` frame is about: a rollout, or an env session. */
export type About = { rollout?: string; id?: string };

/**
 * The `error` frame answering `error`, about `about`. Any error without a frame code is
 * `internal`, its message passed on.
 */
export function errorFrame(error: unknown, about: About = {}): ErrorFrame {
  const code = codeOf(error);
  const known = code === null ? undefined : entryOf(code);
  const message = messageOf(error);
  if (!known?.frame) return { type: "error", code: "internal", message, ...about };
  const field = (error as RollgymError).field;
  const named = field === undefined ? {} : { field };
  return known.fieldFirst
    ? { type: "error", code: known.frame, message, ...named, ...about }
    : { type: "error", code: known.frame, message, ...about, ...named };
}

/**
 * How a WebSocket connection answers `error`: an `error` frame (about `about`), a close (code
 * and a reason of at most 123 bytes), or both, the frame first.
 */
export function wsAnswer(
  error: unknown,
  about: About = {},
): { frame: ErrorFrame | null; close: { code: number; reason: string } | null } {
  const code = codeOf(error);
  const known = code === null ? undefined : entryOf(code);
  const frame = known && !known.frame && known.close !== undefined ? null : errorFrame(error, about);
  if (known?.close === undefined) return { frame, close: null };
  const reason = known.closeReason ?? truncate((error as Error).message);
  return { frame, close: { code: known.close, reason } };
}

/**
 * The HTTP status and JSON body answering a request refused with `error`, or null when the
 * error has no status (a bug: the framework answers 500).
 */
export function httpRefusal(
  error: unknown,
): { status: number; body: { error: { code: number; message: string; field?: string } } } | null {
  const code = codeOf(error);
  const status = code === null ? undefined : entryOf(code).http;
  if (status === undefined) return null;
  const { message, field } = error as RollgymError;
  return { status, body: { error: { code: status, message, ...(field ? { field } : {}) } } };
}

/** Close reasons are limited to 123 bytes. */
function truncate(reason: string): string {
  return Buffer.byteLength(reason) <= 120
    ? reason
    : `${Buffer.from(reason).subarray(0, 117).toString("utf8")}...`;
}
