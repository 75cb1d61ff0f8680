// OpenEnv's messages (docs/openenv.md): what a client may send on /ws and to the HTTP routes,
// checked field by field, and the error frames OpenEnv clients understand. A refusal carries
// pydantic-shaped entries (type, loc, msg, input) like OpenEnv's own, and a message that names
// the field, the value and what is allowed.
import { clip, PREVIEW_CHARS, preview } from "../../protocol/bounded-json.ts";
import { isPlainObject as isObject } from "../../protocol/plain-object.ts";
import { MAX_SEED } from "../../protocol/settings.ts";

/** OpenEnv's WSErrorCode values (types.py). */
export type OpenEnvErrorCode =
  | "INVALID_JSON"
  | "UNKNOWN_TYPE"
  | "VALIDATION_ERROR"
  | "EXECUTION_ERROR"
  | "CAPACITY_REACHED"
  | "FACTORY_ERROR"
  | "SESSION_ERROR";

/** One entry of a VALIDATION_ERROR's `errors`, as pydantic's `errors()` lists them. */
export interface FieldError {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
}

export type ClientMessage =
  | { type: "reset"; seed: number | null; episodeId: string | null }
  | { type: "step"; action: string }
  | { type: "state" }
  | { type: "close" };

export type Checked<T> = { ok: true; value: T } | { ok: false; errors: FieldError[] };

export const MESSAGE_TYPES = ["reset", "step", "state", "close"] as const;

const MAX_ID_CHARS = 255;
/** Entries a VALIDATION_ERROR lists at most. */
const MAX_LISTED_ERRORS = 5;
const RESET_KEYS = ["seed", "episode_id"];
const ACTION_KEYS = ["action", "metadata"];

export function errorFrame(
  code: OpenEnvErrorCode,
  message: string,
  extra: Record<string, unknown> = {},
): string {
  return JSON.stringify({ type: "error", data: { message, code, ...extra } });
}

/** "loc: msg" for each entry, the error's one-line message. */
export function describe(errors: readonly FieldError[]): string {
  return errors.map((e) => (e.loc.length ? `${e.loc.join(".")}: ${e.msg}` : e.msg)).join("; ");
}

/**
 * A parsed /ws frame as a message, or why not. `{unknownType}` for a type OpenEnv's server would
 * answer with UNKNOWN_TYPE.
 */
export function checkMessage(value: unknown): Checked<ClientMessage> | { ok: false; unknownType: string } {
  if (!isObject(value) || typeof value.type !== "string")
    return refuse(
      "model_type",
      [],
      `a message must be a JSON object with a string "type" (${MESSAGE_TYPES.join(", ")})`,
      value,
    );
  switch (value.type) {
    case "reset": {
      const extra = extraKeys(value, ["type", "data"], []);
      if (extra) return extra;
      const data = value.data ?? {};
      if (!isObject(data))
        return refuse("dict_type", ["data"], "must be an object of reset parameters", data);
      const checked = checkResetRequest(data, ["data"]);
      return checked.ok ? { ok: true, value: { type: "reset", ...checked.value } } : checked;
    }
    case "step": {
      const extra = extraKeys(value, ["type", "data"], []);
      if (extra) return extra;
      if (!("data" in value))
        return refuse("missing", ["data"], 'is required: the action, e.g. {"action": "Up"}', value);
      const checked = checkAction(value.data, ["data"]);
      return checked.ok ? { ok: true, value: { type: "step", action: checked.value } } : checked;
    }
    case "state":
    case "close":
      return extraKeys(value, ["type"], []) ?? { ok: true, value: { type: value.type } };
    default:
      return { ok: false, unknownType: value.type };
  }
}

/** OpenEnv's ResetRequest (seed, episode_id), at `loc`. */
export function checkResetRequest(
  data: Record<string, unknown>,
  loc: (string | number)[],
): Checked<{ seed: number | null; episodeId: string | null }> {
  const extra = extraKeys(data, RESET_KEYS, loc);
  if (extra) return extra;
  const seed = data.seed ?? null;
  if (seed !== null && !(Number.isInteger(seed) && (seed as number) >= 0 && (seed as number) <= MAX_SEED))
    return refuse(
      "int_type",
      [...loc, "seed"],
      `${preview(seed)} is not an integer in [0, ${MAX_SEED}]`,
      seed,
    );
  const episodeId = data.episode_id ?? null;
  if (episodeId !== null && (typeof episodeId !== "string" || episodeId.length > MAX_ID_CHARS))
    return refuse(
      "string_type",
      [...loc, "episode_id"],
      `must be a string of at most ${MAX_ID_CHARS} characters, not ${preview(episodeId)}`,
      episodeId,
    );
  return { ok: true, value: { seed: seed as number | null, episodeId: episodeId as string | null } };
}

/** rollgym's action model: `{"action": NAME}` (plus OpenEnv's base `metadata`), at `loc`. */
export function checkAction(data: unknown, loc: (string | number)[]): Checked<string> {
  if (!isObject(data))
    return refuse(
      "dict_type",
      loc,
      `must be an action object like {"action": "Up"}, not ${preview(data)}`,
      data,
    );
  const extra = extraKeys(data, ACTION_KEYS, loc);
  if (extra) return extra;
  if (!("action" in data))
    return refuse("missing", [...loc, "action"], 'is required: an action name, e.g. "Up"', data);
  if (typeof data.action !== "string")
    return refuse(
      "string_type",
      [...loc, "action"],
      `must be an action name (a string), not ${preview(data.action)}`,
      data.action,
    );
  if (data.metadata !== undefined && !isObject(data.metadata))
    return refuse(
      "dict_type",
      [...loc, "metadata"],
      `must be an object, not ${preview(data.metadata)}`,
      data.metadata,
    );
  return { ok: true, value: data.action };
}

function extraKeys(
  value: Record<string, unknown>,
  allowed: readonly string[],
  loc: (string | number)[],
): { ok: false; errors: FieldError[] } | null {
  const extra = Object.keys(value).filter((k) => !allowed.includes(k));
  if (extra.length === 0) return null;
  return {
    ok: false,
    // The first few: an object of 30,000 unknown keys gets an error, not 30,000 of them.
    errors: extra.slice(0, MAX_LISTED_ERRORS).map((k) => ({
      type: "extra_forbidden",
      loc: [...loc, clip(k)],
      msg: `is not a field here; allowed: ${allowed.join(", ")}`,
      input: echo(value[k]),
    })),
  };
}

export function refuse(
  type: string,
  loc: (string | number)[],
  msg: string,
  input: unknown,
): { ok: false; errors: FieldError[] } {
  return { ok: false, errors: [{ type, loc, msg, input: echo(input) }] };
}

/**
 * `input` as an error echoes it (pydantic's field): the value itself when it is small and
 * shallow, else its preview, so a deep or huge input is never walked again by JSON.stringify.
 */
function echo(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return typeof value === "string" ? clip(value) : value;
  const shown = preview(value, PREVIEW_CHARS);
  return shown.endsWith("...") || shown.includes("…") ? shown : value;
}
