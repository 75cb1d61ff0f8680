// Request bodies checked the way vLLM's pydantic request models and serving code check them:
// first the `mode="before"` model validators (one failure stops everything), then field types
// (all failures reported together), both as 400 "Bad Request"; the serving-time checks
// (context length, sampling ranges) are in checkLimits(), as 400 "BadRequestError".
// Field types and nullability follow ChatCompletionRequest / CompletionRequest at upstream
// 22720624 (chat_completion/protocol.py:185-420, completion/protocol.py:43-200).
// Unknown fields are accepted and ignored, as vLLM's `extra="allow"` does.
import { pyFloatRepr } from "../../envs/pyrepr.ts";
import { isPlainObject } from "../../protocol/plain-object.ts";
import type { TemplateMessage } from "./chat-template.ts";
import {
  badRequest,
  type Issue,
  notImplemented,
  pyRepr,
  pyTruthy,
  validationError,
  validatorIssue,
  vllmValidation,
} from "./errors.ts";
import {
  applyGenerationConfig,
  type DefaultableSampling,
  type EffectiveSampling,
  type GenerationConfig,
} from "./generation-config.ts";

export type JsonObject = Record<string, unknown>;

// JSON.parse loses integers beyond 2^53; vLLM range-checks `seed` as an int64, so the literal
// text of a top-level seed is kept for that one check.
const seedSources = new WeakMap<JsonObject, string>();

/** Parse a request body; FastAPI's json_invalid / model_attributes_type errors otherwise. */
export function parseJsonBody(raw: string): JsonObject {
  let value: unknown;
  const sources = new Map<unknown, string>();
  try {
    value = JSON.parse(raw, function (this: unknown, key: string, v: unknown, context?: { source?: string }) {
      if (key === "seed" && typeof v === "number" && context?.source !== undefined)
        sources.set(this, context.source);
      return v;
    });
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    const at = /position (\d+)/.exec(detail);
    throw validationError([
      {
        type: "json_invalid",
        loc: ["body", at ? Number(at[1]) : 0],
        msg: "JSON decode error",
        input: {},
        ctx: { error: detail },
      },
    ]);
  }
  if (!isPlainObject(value)) {
    throw validationError([
      {
        type: "model_attributes_type",
        loc: ["body"],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: value,
      },
    ]);
  }
  const seedSource = sources.get(value);
  if (seedSource !== undefined) seedSources.set(value, seedSource);
  return value;
}

// pydantic v2 lax mode, as FastAPI validates vLLM's request models (python mode, after
// json.loads): numeric strings are numbers, 0/1 and "yes"/"off"/… are booleans, true is 1.
// Checked against pydantic 2.13 and pydantic-core's src/input/shared.rs (str_as_int etc.).

const BOOL_TRUE = new Set(["1", "t", "y", "on", "yes", "true"]);
const BOOL_FALSE = new Set(["0", "f", "n", "no", "off", "false"]);

/** Python's int() of the digits, with pydantic's ".000" and "1_000" allowances; null if not one. */
function laxIntString(text: string): bigint | null {
  const s = text.trim();
  const parse = (t: string): bigint | null => (/^[+-]?\d+$/.test(t) ? BigInt(t) : null);
  const direct = parse(s);
  if (direct !== null) return direct;
  const dot = s.indexOf(".");
  if (dot >= 0) return /^0*$/.test(s.slice(dot + 1)) ? parse(s.slice(0, dot)) : null;
  if (s.startsWith("_") || s.endsWith("_") || !s.includes("_") || s.includes("__")) return null;
  return parse(s.replaceAll("_", ""));
}

/** Rust's f64 parse (pydantic-core's str_as_float), incl. inf/nan and "1_000.5"; null if not one. */
function laxFloatString(text: string): number | null {
  const parse = (t: string): number | null => {
    const special = /^([+-]?)(inf|infinity|nan)$/i.exec(t);
    if (special)
      return special[2].toLowerCase() === "nan" ? Number.NaN : (special[1] === "-" ? -1 : 1) * Infinity;
    return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t) ? Number(t) : null;
  };
  const s = text.trim();
  const direct = parse(s);
  if (direct !== null) return direct;
  if (s.startsWith("_") || s.endsWith("_") || !s.includes("_") || s.includes("__")) return null;
  return parse(s.replaceAll("_", ""));
}

type Loc = readonly (string | number)[];

interface Coerced<T> {
  ok: boolean;
  value?: T;
  issue?: Omit<Issue, "loc" | "input">;
}

function coerceInt(v: unknown): Coerced<number> & { big?: bigint } {
  if (typeof v === "boolean") return { ok: true, value: v ? 1 : 0 };
  if (typeof v === "number") {
    if (!Number.isFinite(v))
      return { ok: false, issue: { type: "finite_number", msg: "Input should be a finite number" } };
    if (!Number.isInteger(v))
      return {
        ok: false,
        issue: {
          type: "int_from_float",
          msg: "Input should be a valid integer, got a number with a fractional part",
        },
      };
    return { ok: true, value: v };
  }
  if (typeof v === "string") {
    const big = laxIntString(v);
    if (big === null)
      return {
        ok: false,
        issue: {
          type: "int_parsing",
          msg: "Input should be a valid integer, unable to parse string as an integer",
        },
      };
    return { ok: true, value: Number(big), big };
  }
  return { ok: false, issue: { type: "int_type", msg: "Input should be a valid integer" } };
}

function coerceFloat(v: unknown): Coerced<number> {
  if (typeof v === "boolean") return { ok: true, value: v ? 1 : 0 };
  if (typeof v === "number") return { ok: true, value: v };
  if (typeof v === "string") {
    const f = laxFloatString(v);
    if (f === null)
      return {
        ok: false,
        issue: {
          type: "float_parsing",
          msg: "Input should be a valid number, unable to parse string as a number",
        },
      };
    return { ok: true, value: f };
  }
  return { ok: false, issue: { type: "float_type", msg: "Input should be a valid number" } };
}

function coerceBool(v: unknown): Coerced<boolean> {
  const parsing = { type: "bool_parsing", msg: "Input should be a valid boolean, unable to interpret input" };
  if (typeof v === "boolean") return { ok: true, value: v };
  if (typeof v === "number") {
    if (v === 0 || v === 1) return { ok: true, value: v === 1 };
    // Python tells 2 (bool_parsing) from 0.5 (bool_type); JSON numbers arrive here the same way.
    return {
      ok: false,
      issue: Number.isInteger(v) ? parsing : { type: "bool_type", msg: "Input should be a valid boolean" },
    };
  }
  if (typeof v === "string") {
    const lower = v.toLowerCase();
    if (BOOL_TRUE.has(lower)) return { ok: true, value: true };
    if (BOOL_FALSE.has(lower)) return { ok: true, value: false };
    return { ok: false, issue: parsing };
  }
  return { ok: false, issue: { type: "bool_type", msg: "Input should be a valid boolean" } };
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * Typed reads of fields, pydantic-style. A JSON null is "absent" for the request model's
 * `X | None` fields and a type error for the others (`nullable: false`). Issues collect.
 */
class Fields {
  readonly issues: Issue[] = [];
  readonly #body: JsonObject;

  constructor(body: JsonObject) {
    this.#body = body;
  }

  raw(name: string): unknown {
    return this.#body[name] ?? undefined;
  }

  /** Sent with an explicit JSON null. */
  isNull(name: string): boolean {
    return this.#body[name] === null;
  }

  #issue(loc: Loc, input: unknown, issue: Omit<Issue, "loc" | "input">): undefined {
    this.issues.push({ ...issue, loc, input });
    return undefined;
  }

  /** The value to check, or undefined (absent / null allowed / null refused with an issue). */
  #value(name: string, nullable: boolean, nullIssue: Omit<Issue, "loc" | "input">): unknown {
    const v = this.#body[name];
    if (v === undefined) return undefined;
    if (v === null) return nullable ? undefined : this.#issue(["body", name], null, nullIssue);
    return v;
  }

  int(name: string, nullable = true): number | undefined {
    const v = this.#value(name, nullable, { type: "int_type", msg: "Input should be a valid integer" });
    if (v === undefined) return undefined;
    const c = coerceInt(v);
    return c.ok ? c.value : this.#issue(["body", name], v, c.issue!);
  }

  /** `int | None` with pydantic's ge/le int64 bounds, checked on the exact literal. */
  int64(name: string): number | undefined {
    const v = this.#value(name, true, { type: "int_type", msg: "Input should be a valid integer" });
    if (v === undefined) return undefined;
    const c = coerceInt(v);
    if (!c.ok) return this.#issue(["body", name], v, c.issue!);
    const source = name === "seed" ? seedSources.get(this.#body) : undefined;
    const exact =
      c.big ?? (source !== undefined && /^-?\d+$/.test(source) ? BigInt(source) : BigInt(c.value!));
    const shown = typeof v === "number" ? exact : v;
    if (exact > INT64_MAX)
      return this.#issue(["body", name], shown, {
        type: "less_than_equal",
        msg: `Input should be less than or equal to ${INT64_MAX}`,
        ctx: { le: INT64_MAX },
      });
    if (exact < INT64_MIN)
      return this.#issue(["body", name], shown, {
        type: "greater_than_equal",
        msg: `Input should be greater than or equal to ${INT64_MIN}`,
        ctx: { ge: INT64_MIN },
      });
    return c.value;
  }

  num(name: string, nullable = true): number | undefined {
    const v = this.#value(name, nullable, { type: "float_type", msg: "Input should be a valid number" });
    if (v === undefined) return undefined;
    const c = coerceFloat(v);
    return c.ok ? c.value : this.#issue(["body", name], v, c.issue!);
  }

  bool(name: string, nullable = true): boolean | undefined {
    const v = this.#value(name, nullable, { type: "bool_type", msg: "Input should be a valid boolean" });
    if (v === undefined) return undefined;
    const c = coerceBool(v);
    return c.ok ? c.value : this.#issue(["body", name], v, c.issue!);
  }

  str(name: string, nullable = true): string | undefined {
    const v = this.#value(name, nullable, { type: "string_type", msg: "Input should be a valid string" });
    if (v === undefined) return undefined;
    if (typeof v !== "string")
      return this.#issue(["body", name], v, { type: "string_type", msg: "Input should be a valid string" });
    return v;
  }

  dict(name: string): JsonObject | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (!isPlainObject(v))
      return this.#issue(["body", name], v, { type: "dict_type", msg: "Input should be a valid dictionary" });
    return v;
  }

  intList(name: string, nullable = true): number[] | undefined {
    const v = this.#value(name, nullable, { type: "list_type", msg: "Input should be a valid list" });
    if (v === undefined) return undefined;
    if (!Array.isArray(v))
      return this.#issue(["body", name], v, { type: "list_type", msg: "Input should be a valid list" });
    const out: number[] = [];
    let ok = true;
    v.forEach((x, i) => {
      const c = coerceInt(x);
      if (c.ok) out.push(c.value!);
      else {
        ok = false;
        this.#issue(["body", name, i], x, c.issue!);
      }
    });
    return ok ? out : undefined;
  }

  /** `list[dict] | None` (tools). */
  dictList(name: string): JsonObject[] | undefined {
    const v = this.#value(name, true, { type: "list_type", msg: "Input should be a valid list" });
    if (v === undefined) return undefined;
    if (!Array.isArray(v))
      return this.#issue(["body", name], v, { type: "list_type", msg: "Input should be a valid list" });
    let ok = true;
    v.forEach((x, i) => {
      if (!isPlainObject(x)) {
        ok = false;
        this.#issue(["body", name, i], x, { type: "dict_type", msg: "Input should be a valid dictionary" });
      }
    });
    return ok ? (v as JsonObject[]) : undefined;
  }

  /** `list[str]` (bad_words). */
  strList(name: string, nullable = true): string[] | undefined {
    const v = this.#value(name, nullable, { type: "list_type", msg: "Input should be a valid list" });
    if (v === undefined) return undefined;
    if (!Array.isArray(v))
      return this.#issue(["body", name], v, { type: "list_type", msg: "Input should be a valid list" });
    let ok = true;
    v.forEach((x, i) => {
      if (typeof x !== "string") {
        ok = false;
        this.#issue(["body", name, i], x, { type: "string_type", msg: "Input should be a valid string" });
      }
    });
    return ok ? (v as string[]) : undefined;
  }

  /** `str | list[str] | None`, as `stop`: a failed union reports both branches. */
  strings(name: string): string[] | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v === "string") return [v];
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
    this.#issue(["body", name, "str"], v, { type: "string_type", msg: "Input should be a valid string" });
    if (!Array.isArray(v))
      return this.#issue(["body", name, "list[str]"], v, {
        type: "list_type",
        msg: "Input should be a valid list",
      });
    v.forEach((x, i) => {
      if (typeof x !== "string")
        this.#issue(["body", name, "list[str]", i], x, {
          type: "string_type",
          msg: "Input should be a valid string",
        });
    });
    return undefined;
  }
}

export interface SamplingFields extends DefaultableSampling {
  model: string | null;
  /** Body `request_id` (the X-Request-Id header, applied by the server, overrides it). */
  requestId: string | null;
  n: number;
  /** The field named in max-token errors (chat: max_completion_tokens when that was sent). */
  maxTokensParam: "max_tokens" | "max_completion_tokens";
  /** Completions with `max_tokens: null`: vLLM generates, then fails an assert (500). */
  maxTokensNull: boolean;
  minTokens: number;
  /** Null when absent, null or -1 (SamplingParams maps -1 to None). */
  seed: number | null;
  stop: string[];
  stopTokenIds: number[];
  badWords: string[];
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  /** Number of alternatives per generated token; null: no logprobs. */
  logprobs: number | null;
  promptLogprobs: number | null;
  returnTokenIds: boolean;
  tokensAsIds: boolean;
  skipSpecialTokens: boolean;
  includeStopStr: boolean;
  ignoreEos: boolean;
  /** Isolates the request's prefix-cache blocks (vLLM's cache_salt); null: none. */
  cacheSalt: string | null;
}

export interface ChatRequest extends SamplingFields {
  kind: "chat";
  messages: TemplateMessage[];
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  templateKwargs: JsonObject;
  /** Tool definitions the template renders into the system turn (empty: none). */
  tools: JsonObject[];
  includeReasoning: boolean;
}

export interface CompletionRequest extends SamplingFields {
  kind: "completion";
  /** A text prompt or a token-id prompt (not re-tokenized). */
  prompt: { text: string } | { ids: number[] };
}

export type GenerationRequest = ChatRequest | CompletionRequest;

function pyTypeName(value: unknown): string {
  if (typeof value === "string") return "str";
  if (Array.isArray(value)) return "list";
  if (typeof value === "object" && value !== null) return "dict";
  if (value === null) return "NoneType";
  return "float";
}

/**
 * The model validators compare raw JSON values with ints; a string or list there is a Python
 * TypeError, which pydantic does not wrap and vLLM's catch-all turns into a 400.
 */
function rawCompare(value: unknown, op: "<" | ">"): number {
  if (typeof value === "number") return value;
  if (typeof value === "boolean") return value ? 1 : 0;
  throw badRequest(`'${op}' not supported between instances of '${pyTypeName(value)}' and 'int'`);
}

function beforeValidatorsCommon(body: JsonObject, kind: "chat" | "completion"): Issue | null {
  if (pyTruthy(body.stream_options) && !pyTruthy(body.stream))
    return validatorIssue("Stream options can only be defined when `stream=True`.", body, "stream_options");
  const promptLogprobs = body.prompt_logprobs;
  if (promptLogprobs !== undefined && promptLogprobs !== null) {
    if (pyTruthy(body.stream) && (rawCompare(promptLogprobs, ">") > 0 || promptLogprobs === -1))
      return validatorIssue(
        "`prompt_logprobs` are not available when `stream=True`.",
        body,
        "prompt_logprobs",
      );
    const value = rawCompare(promptLogprobs, "<");
    if (value < 0 && value !== -1)
      return validatorIssue(
        "`prompt_logprobs` must be a positive value or -1.",
        body,
        "prompt_logprobs",
        String(value),
      );
  }
  if (kind === "completion" && body.logprobs !== undefined && body.logprobs !== null) {
    const value = rawCompare(body.logprobs, "<");
    if (value < 0)
      return validatorIssue("`logprobs` must be a positive value.", body, "logprobs", String(value));
  }
  if (body.cache_salt !== undefined && body.cache_salt !== null) {
    if (typeof body.cache_salt !== "string" || body.cache_salt === "")
      return validatorIssue("Parameter 'cache_salt' must be a non-empty string if provided.", body);
  }
  return null;
}

function beforeValidatorsChat(body: JsonObject): Issue | null {
  const common = beforeValidatorsCommon(body, "chat");
  if (common) return common;
  const top = body.top_logprobs;
  if (top !== undefined && top !== null) {
    const value = rawCompare(top, "<");
    if (value < 0 && value !== -1)
      return validatorIssue(
        "`top_logprobs` must be a positive value or -1.",
        body,
        "top_logprobs",
        String(value),
      );
    if ((value === -1 || value > 0) && !pyTruthy(body.logprobs))
      return validatorIssue(
        "when using `top_logprobs`, `logprobs` must be set to true.",
        body,
        "top_logprobs",
      );
  }
  if (Array.isArray(body.tools) && body.tools.length === 0)
    return validatorIssue(
      "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
      body,
    );
  if (pyTruthy(body.continue_final_message) && pyTruthy(body.add_generation_prompt))
    return validatorIssue(
      "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
      body,
    );
  return null;
}

function readSampling(f: Fields, kind: "chat" | "completion"): SamplingFields {
  const streamOptions = f.dict("stream_options");
  // Chat: logprobs is a switch and top_logprobs the count (an explicit null count means none);
  // completions: logprobs is the count.
  let logprobs: number | null = null;
  if (kind === "chat") {
    const on = f.bool("logprobs");
    const top = f.int("top_logprobs");
    if (on && !f.isNull("top_logprobs")) logprobs = top ?? 0;
  } else {
    logprobs = f.int("logprobs") ?? null;
  }
  const maxCompletion = kind === "chat" ? f.int("max_completion_tokens") : undefined;
  const maxTokens = f.int("max_tokens");
  // Not Optional in vLLM's request models: a JSON null fails validation.
  f.bool("use_beam_search", false);
  f.num("length_penalty", false);
  f.bool("spaces_between_special_tokens", false);
  f.int("priority", false);
  const seed = f.int64("seed") ?? null;
  let requested: number | null;
  if (kind === "chat") requested = maxCompletion ?? maxTokens ?? null;
  else requested = f.isNull("max_tokens") ? null : (maxTokens ?? 16);
  return {
    model: f.str("model") ?? null,
    requestId: f.str("request_id", false) ?? null,
    n: f.int("n", kind === "chat") ?? 1,
    maxTokens: requested,
    maxTokensParam: maxCompletion !== undefined ? "max_completion_tokens" : "max_tokens",
    maxTokensNull: kind === "completion" && f.isNull("max_tokens"),
    minTokens: f.int("min_tokens", false) ?? 0,
    seed: seed === -1 ? null : seed,
    temperature: f.num("temperature") ?? null,
    topP: f.num("top_p") ?? null,
    topK: f.int("top_k") ?? null,
    minP: f.num("min_p") ?? null,
    repetitionPenalty: f.num("repetition_penalty") ?? null,
    presencePenalty: f.num("presence_penalty") ?? null,
    frequencyPenalty: f.num("frequency_penalty") ?? null,
    stop: f.strings("stop") ?? [],
    stopTokenIds: f.intList("stop_token_ids") ?? [],
    // Completions have no bad_words at this vLLM (an unknown field, ignored).
    badWords: kind === "chat" ? (f.strList("bad_words", false) ?? []) : [],
    stream: f.bool("stream") ?? false,
    includeUsage: streamOptions?.include_usage === true,
    continuousUsage: streamOptions?.include_usage === true && streamOptions?.continuous_usage_stats === true,
    logprobs,
    promptLogprobs: f.int("prompt_logprobs") ?? null,
    returnTokenIds: f.bool("return_token_ids") ?? false,
    tokensAsIds: f.bool("return_tokens_as_token_ids") ?? false,
    skipSpecialTokens: f.bool("skip_special_tokens", false) ?? true,
    includeStopStr: f.bool("include_stop_str_in_output", false) ?? false,
    ignoreEos: f.bool("ignore_eos", false) ?? false,
    cacheSalt: f.str("cache_salt") ?? null,
  };
}

/** Features a real server has and the mock does not: 501, so a test never passes by accident. */
function rejectUnsupported(f: Fields, kind: "chat" | "completion"): void {
  if (f.raw("echo") === true) throw notImplemented("`echo` is not supported by the mock engine.", "echo");
  if (f.raw("use_beam_search") === true)
    throw notImplemented("Beam search is not supported by the mock engine.", "use_beam_search");
  if (f.raw("structured_outputs") !== undefined)
    throw notImplemented("`structured_outputs` is not supported by the mock engine.", "structured_outputs");
  const responseFormat = f.raw("response_format");
  if (isPlainObject(responseFormat) && responseFormat.type !== "text")
    throw notImplemented(
      "`response_format` other than text is not supported by the mock engine.",
      "response_format",
    );
  if (kind === "completion" && f.raw("suffix") !== undefined)
    throw badRequest("suffix is not currently supported", "suffix");
  if (kind === "chat") {
    if (f.raw("chat_template") !== undefined)
      throw badRequest(
        "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.",
        "chat_template",
      );
    const tools = f.raw("tools");
    const choice = f.raw("tool_choice") ?? (Array.isArray(tools) && tools.length > 0 ? "auto" : "none");
    if (choice === "auto")
      throw badRequest(
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tool_choice",
      );
    if (choice !== "none")
      throw notImplemented("Tool calling is not supported by the mock engine.", "tool_choice");
  }
}

function contentText(content: unknown, index: number, issues: Issue[]): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    const texts: string[] = [];
    for (const [j, part] of content.entries()) {
      if (isPlainObject(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
      else if (isPlainObject(part) && typeof part.type === "string" && part.type !== "text")
        throw badRequest(
          `The mock engine is a text-only model; content part type '${part.type}' is not supported.`,
          "messages",
        );
      else
        issues.push({
          type: "model_type",
          loc: ["body", "messages", index, "content", j],
          msg: "Input should be a text content part",
          input: part,
        });
    }
    // vLLM joins text parts with newlines for string-content templates.
    return texts.join("\n");
  }
  issues.push({
    type: "string_type",
    loc: ["body", "messages", index, "content"],
    msg: "Input should be a valid string",
    input: content,
  });
  return "";
}

function readMessages(f: Fields, body: JsonObject): TemplateMessage[] {
  const raw = body.messages;
  if (raw === undefined) {
    f.issues.push({ type: "missing", loc: ["body", "messages"], msg: "Field required", input: body });
    return [];
  }
  if (!Array.isArray(raw)) {
    f.issues.push({
      type: "list_type",
      loc: ["body", "messages"],
      msg: "Input should be a valid list",
      input: raw,
    });
    return [];
  }
  const messages: TemplateMessage[] = [];
  raw.forEach((m, i) => {
    if (!isPlainObject(m)) {
      f.issues.push({
        type: "dict_type",
        loc: ["body", "messages", i],
        msg: "Input should be a valid dictionary",
        input: m,
      });
      return;
    }
    if (typeof m.role !== "string") {
      const missing = m.role === undefined;
      f.issues.push({
        type: missing ? "missing" : "string_type",
        loc: ["body", "messages", i, "role"],
        msg: missing ? "Field required" : "Input should be a valid string",
        input: missing ? m : m.role,
      });
      return;
    }
    messages.push({ role: m.role, content: contentText(m.content, i, f.issues) });
  });
  return messages;
}

// The request validator only sees fields that were sent; with add_generation_prompt left at its
// default (true), continue_final_message fails later in transformers' apply_chat_template.
function checkGenerationPrompt(addGenerationPrompt: boolean, continueFinalMessage: boolean): void {
  if (addGenerationPrompt && continueFinalMessage)
    throw badRequest(
      "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.",
    );
}

export function parseChatRequest(body: JsonObject): ChatRequest {
  const before = beforeValidatorsChat(body);
  if (before) throw validationError([before]);
  const f = new Fields(body);
  const messages = readMessages(f, body);
  const sampling = readSampling(f, "chat");
  const addGenerationPrompt = f.bool("add_generation_prompt", false) ?? true;
  const continueFinalMessage = f.bool("continue_final_message", false) ?? false;
  const templateKwargs = f.dict("chat_template_kwargs") ?? {};
  const tools = f.dictList("tools") ?? [];
  const includeReasoning = f.bool("include_reasoning", false) ?? true;
  f.bool("add_special_tokens", false);
  f.bool("echo", false);
  if (f.issues.length > 0) throw validationError(f.issues);
  rejectUnsupported(f, "chat");
  checkGenerationPrompt(addGenerationPrompt, continueFinalMessage);
  if (messages.length === 0) throw badRequest("`messages` must contain at least one message.", "messages");
  return {
    kind: "chat",
    ...sampling,
    messages,
    addGenerationPrompt,
    continueFinalMessage,
    templateKwargs,
    tools,
    includeReasoning,
  };
}

const EMPTY_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty.";

function readPrompt(f: Fields, body: JsonObject): CompletionRequest["prompt"] | null {
  const raw = body.prompt;
  if (typeof raw === "string") return { text: raw };
  if (Array.isArray(raw)) {
    if (raw.length === 0) return null;
    if (raw.every((x) => typeof x === "number" && Number.isInteger(x))) return { ids: raw as number[] };
    // A batch of one is the same request; larger batches are out of the mock's scope.
    if (raw.length > 1 && raw.every((x) => typeof x === "string" || Array.isArray(x)))
      throw notImplemented(
        "Batched prompts are not supported by the mock engine; send one prompt per request.",
        "prompt",
      );
    const only = raw[0];
    if (typeof only === "string") return { text: only };
    if (Array.isArray(only) && only.every((x) => typeof x === "number" && Number.isInteger(x)))
      return only.length > 0 ? { ids: only as number[] } : null;
  }
  f.issues.push({
    type: "union_type",
    loc: ["body", "prompt"],
    msg: "Input should be a valid string, a list of strings, a list of integers or a list of lists of integers",
    input: raw,
  });
  return null;
}

export function parseCompletionRequest(body: JsonObject): CompletionRequest {
  const before = beforeValidatorsCommon(body, "completion");
  if (before) throw validationError([before]);
  if (body.prompt === undefined || body.prompt === null || body.prompt === "") {
    if (body.prompt_embeds === undefined || body.prompt_embeds === null)
      throw validationError([validatorIssue(EMPTY_PROMPT, body)]);
    throw notImplemented("`prompt_embeds` is not supported by the mock engine.", "prompt_embeds");
  }
  const f = new Fields(body);
  const prompt = readPrompt(f, body);
  const sampling = readSampling(f, "completion");
  f.bool("add_special_tokens", false);
  f.bool("echo");
  if (f.issues.length > 0) throw validationError(f.issues);
  rejectUnsupported(f, "completion");
  if (prompt === null) throw validationError([validatorIssue(EMPTY_PROMPT, body)]);
  if ("ids" in prompt && prompt.ids.some((id) => id < 0))
    throw validationError([
      {
        type: "greater_than_equal",
        loc: ["body", "prompt"],
        msg: "Input should be greater than or equal to 0",
        input: prompt.ids,
      },
    ]);
  return { kind: "completion", ...sampling, prompt };
}

export type TokenizeRequest =
  | { kind: "completion"; model: string | null; prompt: string; returnTokenStrs: boolean }
  | {
      kind: "chat";
      model: string | null;
      messages: TemplateMessage[];
      addGenerationPrompt: boolean;
      continueFinalMessage: boolean;
      templateKwargs: JsonObject;
      tools: JsonObject[];
      returnTokenStrs: boolean;
    };

/** `/tokenize` takes TokenizeCompletionRequest or TokenizeChatRequest (chosen by `messages`). */
export function parseTokenizeRequest(body: JsonObject): TokenizeRequest {
  const f = new Fields(body);
  const model = f.str("model") ?? null;
  const returnTokenStrs = f.bool("return_token_strs") ?? false;
  f.bool("add_special_tokens", false);
  if (body.messages !== undefined) {
    if (pyTruthy(body.continue_final_message) && pyTruthy(body.add_generation_prompt))
      throw validationError([
        validatorIssue("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", body),
      ]);
    const messages = readMessages(f, body);
    const addGenerationPrompt = f.bool("add_generation_prompt", false) ?? true;
    const continueFinalMessage = f.bool("continue_final_message", false) ?? false;
    const templateKwargs = f.dict("chat_template_kwargs") ?? {};
    const tools = f.dictList("tools") ?? [];
    if (f.issues.length > 0) throw validationError(f.issues);
    checkGenerationPrompt(addGenerationPrompt, continueFinalMessage);
    return {
      kind: "chat",
      model,
      messages,
      addGenerationPrompt,
      continueFinalMessage,
      templateKwargs,
      tools,
      returnTokenStrs,
    };
  }
  if (body.prompt === undefined)
    f.issues.push({ type: "missing", loc: ["body", "prompt"], msg: "Field required", input: body });
  const prompt = f.str("prompt", false);
  if (f.issues.length > 0 || prompt === undefined) throw validationError(f.issues);
  return { kind: "completion", model, prompt, returnTokenStrs };
}

export function parseDetokenizeRequest(body: JsonObject): { model: string | null; tokens: number[] } {
  const f = new Fields(body);
  const model = f.str("model") ?? null;
  if (body.tokens === undefined)
    f.issues.push({ type: "missing", loc: ["body", "tokens"], msg: "Field required", input: body });
  const tokens = f.intList("tokens", false);
  if (f.issues.length > 0 || tokens === undefined) throw validationError(f.issues);
  return { model, tokens };
}

export interface LimitsConfig {
  maxModelLen: number;
  /** Ids 0..vocabSize-1 are accepted; logprobs -1 means this many. */
  vocabSize: number;
  maxLogprobs: number;
  generationConfig: GenerationConfig;
}

export interface PreparedSampling extends EffectiveSampling {
  /** The effective max_tokens: requested, else min(the server default, the room left). */
  maxTokens: number;
}

/** VLLM_MAX_N_SEQUENCES's default. */
const MAX_N = 16384;
/** SamplingParams' _SAMPLING_EPS: below it, sampling is greedy. */
const SAMPLING_EPS = 1e-5;

/**
 * The serving-time checks, in vLLM's order: the renderer's length checks
 * (renderers/params.py), SamplingParams._verify_args with the server defaults filled in
 * (sampling_params.py:486-590), the engine's logprob caps, then the engine's own prompt checks
 * (v1/engine/input_processor.py:387-476). Returns the sampling parameters the engine would use.
 */
export function checkLimits(
  req: GenerationRequest,
  promptIds: readonly number[],
  limits: LimitsConfig,
): PreparedSampling {
  const { maxModelLen } = limits;
  const promptLen = promptIds.length;
  if (req.maxTokens !== null && req.maxTokens > maxModelLen)
    throw vllmValidation(
      `${req.maxTokensParam}=${req.maxTokens} cannot be greater than max_model_len=max_total_tokens=${maxModelLen}. Please request fewer output tokens.`,
      req.maxTokensParam,
      String(req.maxTokens),
    );
  const requested = req.maxTokens ?? 0;
  if (promptLen > maxModelLen - requested)
    throw vllmValidation(
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${requested} output tokens and your prompt contains ${promptLen} input tokens, for a total of ${promptLen + requested} tokens. Please reduce the length of the input prompt or the number of requested output tokens.`,
      "input_tokens",
      String(promptLen),
    );
  const effective = applyGenerationConfig(req, limits.generationConfig);
  // get_max_tokens: the smallest of the room left and the request's (or the server's) limit.
  const room = maxModelLen - promptLen;
  const maxTokens = Math.min(room, req.maxTokens ?? effective.maxTokensDefault ?? room);

  // SamplingParams._verify_args, in its order; plain ValueErrors carry no param.
  const f = pyFloatRepr;
  if (req.n < 1) throw badRequest(`n must be at least 1, got ${req.n}.`);
  if (req.n > MAX_N)
    throw badRequest(
      `n must be at most ${MAX_N}, got ${req.n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.`,
    );
  const { presencePenalty, frequencyPenalty, repetitionPenalty, temperature, topP, topK, minP } = effective;
  if (!(-2 <= presencePenalty && presencePenalty <= 2))
    throw badRequest(`presence_penalty must be in [-2, 2], got ${f(presencePenalty)}.`);
  if (!(-2 <= frequencyPenalty && frequencyPenalty <= 2))
    throw badRequest(`frequency_penalty must be in [-2, 2], got ${f(frequencyPenalty)}.`);
  if (repetitionPenalty <= 0)
    throw badRequest(`repetition_penalty must be greater than zero, got ${f(repetitionPenalty)}.`);
  if (temperature < 0)
    throw vllmValidation(
      `temperature must be non-negative, got ${f(temperature)}.`,
      "temperature",
      f(temperature),
    );
  if (!(0 < topP && topP <= 1))
    throw vllmValidation(`top_p must be in (0, 1], got ${f(topP)}.`, "top_p", f(topP));
  if (topK < -1) throw badRequest(`top_k must be 0 (disable), or at least 1, got ${topK}.`);
  if (!(0 <= minP && minP <= 1)) throw badRequest(`min_p must be in [0, 1], got ${f(minP)}.`);
  if (maxTokens < 1)
    throw vllmValidation(`max_tokens must be at least 1, got ${maxTokens}.`, "max_tokens", String(maxTokens));
  if (req.minTokens < 0)
    throw badRequest(`min_tokens must be greater than or equal to 0, got ${req.minTokens}.`);
  if (req.minTokens > maxTokens)
    throw badRequest(
      `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${req.minTokens}.`,
    );
  if (req.logprobs !== null && req.logprobs !== -1 && req.logprobs < 0)
    throw vllmValidation(
      `logprobs must be non-negative or -1, got ${req.logprobs}.`,
      "logprobs",
      String(req.logprobs),
    );
  if (req.promptLogprobs !== null && req.promptLogprobs !== -1 && req.promptLogprobs < 0)
    throw vllmValidation(
      `prompt_logprobs must be non-negative or -1, got ${req.promptLogprobs}.`,
      "prompt_logprobs",
      String(req.promptLogprobs),
    );
  if (req.stop.some((s) => s === "")) throw badRequest("stop cannot contain an empty string.");
  if (req.badWords.some((w) => w === ""))
    throw badRequest(`bad_words cannot contain an empty string. Got bad_words=${pyRepr(req.badWords)}`);
  if (temperature < SAMPLING_EPS && req.n > 1)
    throw badRequest(`n must be 1 when using greedy sampling, got ${req.n}.`);

  // SamplingParams._validate_logprobs (engine side): -1 means the whole vocabulary.
  const cap = limits.maxLogprobs === -1 ? limits.vocabSize : limits.maxLogprobs;
  if (req.logprobs) {
    const wanted = req.logprobs === -1 ? limits.vocabSize : req.logprobs;
    if (wanted > cap)
      throw vllmValidation(
        `Requested sample logprobs of ${wanted}, which is greater than max allowed: ${cap}`,
        "logprobs",
        String(wanted),
      );
  }
  if (req.promptLogprobs) {
    const wanted = req.promptLogprobs === -1 ? limits.vocabSize : req.promptLogprobs;
    if (wanted > cap)
      throw vllmValidation(
        `Requested prompt logprobs of ${wanted}, which is greater than max allowed: ${cap}`,
        "prompt_logprobs",
        String(wanted),
      );
  }

  // The engine's prompt checks.
  if (promptLen === 0) throw badRequest("The decoder prompt cannot be empty");
  if (promptLen >= maxModelLen)
    throw badRequest(
      `The decoder prompt (length ${promptLen}) plus the number of requested output tokens (at least 1) is longer than the maximum model length of ${maxModelLen}. Make sure that \`max_model_len\` is no smaller than the number of text tokens (prompt + requested output tokens).`,
    );
  const maxId = promptIds.reduce((m, id) => Math.max(m, id), 0);
  if (maxId >= limits.vocabSize) throw badRequest(`Token id ${maxId} is out of vocabulary`);
  return { ...effective, maxTokens };
}
