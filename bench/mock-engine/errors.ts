// vLLM's error responses: `{"error": {"message", "type", "param", "code"}}` (since ≈0.10.1).
// Request-model (pydantic) failures have type "Bad Request" and pydantic's error text;
// checks in the serving code have type "BadRequestError" and usually a `param`.
import { pyFloatRepr } from "../../envs/pyrepr.ts";

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: number };
}

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

  body(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.status } };
  }
}

/** A VLLMValidationError (or ValueError) raised while serving: 400 BadRequestError. */
export function badRequest(message: string, param: string | null = null): ApiError {
  return new ApiError(400, "BadRequestError", message, param);
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

/** Python's repr() of a JSON value (tuples for `loc`), for pydantic-style messages. */
export function pyRepr(value: unknown, tuple = false): string {
  if (value === null || value === undefined) return "None";
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
export function validatorIssue(message: string, input: unknown, param?: string): Issue {
  const text = param === undefined ? message : `${message} (parameter=${param})`;
  return {
    type: "value_error",
    loc: ["body"],
    msg: `Value error, ${text}`,
    input,
    ctx: { error: text },
    param,
  };
}
