// vLLM's error responses: `{"error": {"message", "type", "param", "code"}}` (since ≈0.10.1;
// before that the flat `{"object": "error", "message", "type", "param": null, "code"}`).
// Request-model (pydantic) failures have type "Bad Request" and pydantic's error text;
// checks in the serving code have type "BadRequestError" and usually a `param`.
import { pyFloatRepr } from "../../envs/pyrepr.ts";

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

/** vLLM < 0.10.1 (facts §5.1): no `error` wrapper, and `param` was never filled. */
export interface FlatErrorBody {
  object: "error";
  message: string;
  type: string;
  param: null;
  code: number;
}

export type ErrorShape = "nested" | "flat";

export class ApiError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;

  constructor(status: number, type: string, message: string, param: string | null = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.type = type;
    this.param = param;
  }

  body(): ErrorBody;
  body(shape: ErrorShape): ErrorBody | FlatErrorBody;
  body(shape: ErrorShape = "nested"): ErrorBody | FlatErrorBody {
    if (shape === "flat")
      return { object: "error", message: this.message, type: this.type, param: null, code: this.status };
    return { error: { message: this.message, type: this.type, param: this.param, code: this.status } };
  }
}

/** A VLLMValidationError (or ValueError) raised while serving: 400 BadRequestError. */
export function badRequest(message: string, param: string | null = null): ApiError {
  return new ApiError(400, "BadRequestError", message, param);
}

/**
 * A VLLMValidationError: its str() appends "(parameter=…, value=…)", and that string is the
 * message (vllm/exceptions.py:29-36). `value` is Python's str() of the value, already formatted.
 */
export function vllmValidation(message: string, param: string, value?: string): ApiError {
  const extras = [`parameter=${param}`, ...(value === undefined ? [] : [`value=${value}`])];
  return new ApiError(400, "BadRequestError", `${message} (${extras.join(", ")})`, param);
}

export function modelNotFound(model: string): ApiError {
  return new ApiError(404, "NotFoundError", `The model \`${model}\` does not exist.`, "model");
}

export function notImplemented(message: string, param: string | null = null): ApiError {
  return new ApiError(501, "NotImplementedError", message, param);
}

/** An HTTPException with the status's phrase as type (how vLLM wraps 404/405 and friends). */
export function httpError(status: number, phrase: string): ApiError {
  return new ApiError(status, phrase, phrase);
}

/** One entry of pydantic's `exc.errors()`. */
export interface Issue {
  type: string;
  loc: readonly (string | number)[];
  msg: string;
  input: unknown;
  ctx?: Readonly<Record<string, unknown>>;
  /** The VLLMValidationError parameter, which vLLM copies to the response's `param`. */
  param?: string;
}

const INPUT_REPR_LIMIT = 200;

function pyStringRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch < " ") out += `\\x${ch.charCodeAt(0).toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + quote;
}

/** Python's bool() of a JSON value (empty lists and dicts are false, unlike in JS). */
export function pyTruthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === 0 || value === "") return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === "object") return Object.keys(value).length > 0;
  return true;
}

/** Python's repr() of a JSON value (tuples for `loc`), for pydantic-style messages. */
export function pyRepr(value: unknown, tuple = false): string {
  if (value === null || value === undefined) return "None";
  if (typeof value === "bigint") return String(value);
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : pyFloatRepr(value);
  if (typeof value === "string") return pyStringRepr(value);
  if (Array.isArray(value)) {
    const items = value.map((v) => pyRepr(v));
    if (tuple) return items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`;
    return `[${items.join(", ")}]`;
  }
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).map(
      ([k, v]) => `${pyStringRepr(k)}: ${pyRepr(v)}`,
    );
    return `{${entries.join(", ")}}`;
  }
  return pyStringRepr(String(value));
}

function issueRepr(issue: Issue): string {
  let input = pyRepr(issue.input);
  // Request bodies can be huge (whole conversations); keep messages readable.
  if (input.length > INPUT_REPR_LIMIT) input = `${input.slice(0, INPUT_REPR_LIMIT)}...`;
  let out = `{'type': ${pyRepr(issue.type)}, 'loc': ${pyRepr(issue.loc, true)}, 'msg': ${pyRepr(issue.msg)}, 'input': ${input}`;
  if (issue.ctx) out += `, 'ctx': ${pyRepr(issue.ctx)}`;
  return `${out}}`;
}

/** vLLM's validation_exception_handler: `str(exc)` plus `str(exc.errors())`, type "Bad Request". */
export function validationError(issues: readonly Issue[]): ApiError {
  const reprs = issues.map(issueRepr);
  const count = `${issues.length} validation error${issues.length === 1 ? "" : "s"}:\n`;
  const message = `${count}${reprs.map((r) => `  ${r}\n`).join("")} [${reprs.join(", ")}]`;
  const param = issues.find((i) => i.param !== undefined)?.param ?? null;
  return new ApiError(400, "Bad Request", message, param);
}

/** A failed `mode="before"` model validator raising VLLMValidationError(message, parameter). */
export function validatorIssue(message: string, input: unknown, param?: string, value?: string): Issue {
  const extras = [
    ...(param === undefined ? [] : [`parameter=${param}`]),
    ...(value === undefined ? [] : [`value=${value}`]),
  ];
  const text = extras.length === 0 ? message : `${message} (${extras.join(", ")})`;
  return {
    type: "value_error",
    loc: ["body"],
    msg: `Value error, ${text}`,
    input,
    ctx: { error: text },
    param,
  };
}
