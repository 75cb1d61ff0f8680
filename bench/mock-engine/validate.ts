// Request bodies checked the way vLLM's pydantic request models and serving code check them:
// first the `mode="before"` model validators (one failure stops everything), then field types
// (all failures reported together), both as 400 "Bad Request"; the serving-time checks
// (context length, sampling ranges) are in prepare(), as 400 "BadRequestError".
// Unknown fields are accepted and ignored, as vLLM's `extra="allow"` does.
import { pyFloatRepr } from "../../envs/pyrepr.ts";
import type { TemplateMessage } from "./chat-template.ts";
import { badRequest, type Issue, notImplemented, validationError, validatorIssue } from "./errors.ts";
import { VOCAB_SIZE } from "./tokenizer.ts";

export type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Parse a request body; FastAPI's json_invalid / model_attributes_type errors otherwise. */
export function parseJsonBody(raw: string): JsonObject {
  let value: unknown;
  try {
    value = JSON.parse(raw);
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
  if (!isObject(value)) {
    throw validationError([
      {
        type: "model_attributes_type",
        loc: ["body"],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: value,
      },
    ]);
  }
  return value;
}

/** Typed reads of optional fields; a JSON null counts as absent. Wrong types become issues. */
class Fields {
  readonly issues: Issue[] = [];
  readonly #body: JsonObject;

  constructor(body: JsonObject) {
    this.#body = body;
  }

  raw(name: string): unknown {
    return this.#body[name] ?? undefined;
  }

  #fail(name: string, type: string, msg: string): undefined {
    this.issues.push({ type, loc: ["body", name], msg, input: this.#body[name] });
    return undefined;
  }

  int(name: string): number | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v))
      return this.#fail(name, "int_type", "Input should be a valid integer");
    if (!Number.isInteger(v))
      return this.#fail(
        name,
        "int_from_float",
        "Input should be a valid integer, got a number with a fractional part",
      );
    return v;
  }

  num(name: string): number | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v))
      return this.#fail(name, "float_type", "Input should be a valid number");
    return v;
  }

  bool(name: string): boolean | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v !== "boolean") return this.#fail(name, "bool_type", "Input should be a valid boolean");
    return v;
  }

  str(name: string): string | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v !== "string") return this.#fail(name, "string_type", "Input should be a valid string");
    return v;
  }

  dict(name: string): JsonObject | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (!isObject(v)) return this.#fail(name, "dict_type", "Input should be a valid dictionary");
    return v;
  }

  intList(name: string): number[] | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || !v.every((x) => typeof x === "number" && Number.isInteger(x)))
      return this.#fail(name, "list_type", "Input should be a valid list of integers");
    return v as number[];
  }

  /** `str | list[str]`, as `stop`. */
  strings(name: string): string[] | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    if (typeof v === "string") return [v];
    if (!Array.isArray(v) || !v.every((x) => typeof x === "string"))
      return this.#fail(name, "list_type", "Input should be a valid string or list of strings");
    return v as string[];
  }
}

export interface SamplingFields {
  model: string | null;
  /** Body `request_id` (the X-Request-Id header, applied by the server, overrides it). */
  requestId: string | null;
  n: number;
  /** As requested; null when the client left it out. */
  maxTokens: number | null;
  minTokens: number;
  seed: number | null;
  temperature: number | null;
  topP: number | null;
  topK: number | null;
  minP: number | null;
  stop: string[];
  stopTokenIds: number[];
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
}

export interface ChatRequest extends SamplingFields {
  kind: "chat";
  messages: TemplateMessage[];
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  templateKwargs: JsonObject;
}

export interface CompletionRequest extends SamplingFields {
  kind: "completion";
  /** A text prompt or a token-id prompt (not re-tokenized). */
  prompt: { text: string } | { ids: number[] };
}

export type GenerationRequest = ChatRequest | CompletionRequest;

function beforeValidatorsCommon(body: JsonObject): Issue | null {
  if (body.stream_options && !body.stream)
    return validatorIssue("Stream options can only be defined when `stream=True`.", body, "stream_options");
  const promptLogprobs = body.prompt_logprobs;
  if (promptLogprobs !== undefined && promptLogprobs !== null) {
    if (typeof promptLogprobs !== "number")
      return validatorIssue("`prompt_logprobs` must be an integer.", body, "prompt_logprobs");
    if (body.stream && (promptLogprobs > 0 || promptLogprobs === -1))
      return validatorIssue(
        "`prompt_logprobs` are not available when `stream=True`.",
        body,
        "prompt_logprobs",
      );
    if (promptLogprobs < 0 && promptLogprobs !== -1)
      return validatorIssue("`prompt_logprobs` must be a positive value or -1.", body, "prompt_logprobs");
  }
  if (body.cache_salt !== undefined && body.cache_salt !== null) {
    if (typeof body.cache_salt !== "string" || body.cache_salt === "")
      return validatorIssue(
        "Parameter 'cache_salt' must be a non-empty string if provided.",
        body,
        "cache_salt",
      );
  }
  return null;
}

function beforeValidatorsChat(body: JsonObject): Issue | null {
  const common = beforeValidatorsCommon(body);
  if (common) return common;
  const top = body.top_logprobs;
  if (top !== undefined && top !== null) {
    if (typeof top !== "number")
      return validatorIssue("`top_logprobs` must be an integer.", body, "top_logprobs");
    if (top < 0 && top !== -1)
      return validatorIssue("`top_logprobs` must be a positive value or -1.", body, "top_logprobs");
    if ((top === -1 || top > 0) && !body.logprobs)
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
      "tools",
    );
  if (body.continue_final_message && body.add_generation_prompt)
    return validatorIssue(
      "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
      body,
    );
  return null;
}

function readSampling(f: Fields, kind: "chat" | "completion"): SamplingFields {
  const streamOptions = f.dict("stream_options");
  // Chat: logprobs is a switch and top_logprobs the count; completions: logprobs is the count.
  let logprobs: number | null = null;
  if (kind === "chat") {
    const on = f.bool("logprobs");
    const top = f.int("top_logprobs");
    if (on) logprobs = top ?? 0;
  } else {
    logprobs = f.int("logprobs") ?? null;
  }
  const maxCompletion = kind === "chat" ? f.int("max_completion_tokens") : undefined;
  const maxTokens = f.int("max_tokens");
  return {
    model: f.str("model") ?? null,
    requestId: f.str("request_id") ?? null,
    n: f.int("n") ?? 1,
    // max_completion_tokens wins over the deprecated alias; completions default to 16.
    maxTokens: maxCompletion ?? maxTokens ?? (kind === "completion" ? 16 : null),
    minTokens: f.int("min_tokens") ?? 0,
    seed: f.int("seed") ?? null,
    temperature: f.num("temperature") ?? null,
    topP: f.num("top_p") ?? null,
    topK: f.int("top_k") ?? null,
    minP: f.num("min_p") ?? null,
    stop: f.strings("stop") ?? [],
    stopTokenIds: f.intList("stop_token_ids") ?? [],
    stream: f.bool("stream") ?? false,
    includeUsage: streamOptions?.include_usage === true,
    continuousUsage: streamOptions?.include_usage === true && streamOptions?.continuous_usage_stats === true,
    logprobs,
    promptLogprobs: f.int("prompt_logprobs") ?? null,
    returnTokenIds: f.bool("return_token_ids") ?? false,
    tokensAsIds: f.bool("return_tokens_as_token_ids") ?? false,
    skipSpecialTokens: f.bool("skip_special_tokens") ?? true,
    includeStopStr: f.bool("include_stop_str_in_output") ?? false,
    ignoreEos: f.bool("ignore_eos") ?? false,
  };
}

/** Features a real server has and the mock does not: 501, so a test never passes by accident. */
function rejectUnsupported(f: Fields, kind: "chat" | "completion"): void {
  f.bool("echo");
  f.bool("use_beam_search");
  if (f.raw("echo") === true) throw notImplemented("`echo` is not supported by the mock engine.", "echo");
  if (f.raw("use_beam_search") === true)
    throw notImplemented("Beam search is not supported by the mock engine.", "use_beam_search");
  if (f.raw("structured_outputs") !== undefined)
    throw notImplemented("`structured_outputs` is not supported by the mock engine.", "structured_outputs");
  const responseFormat = f.raw("response_format");
  if (isObject(responseFormat) && responseFormat.type !== "text")
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
      if (isObject(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
      else if (isObject(part) && typeof part.type === "string" && part.type !== "text")
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
    if (!isObject(m)) {
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
  const addGenerationPrompt = f.bool("add_generation_prompt") ?? true;
  const continueFinalMessage = f.bool("continue_final_message") ?? false;
  const templateKwargs = f.dict("chat_template_kwargs") ?? {};
  f.bool("add_special_tokens");
  if (f.issues.length > 0) throw validationError(f.issues);
  rejectUnsupported(f, "chat");
  checkGenerationPrompt(addGenerationPrompt, continueFinalMessage);
  if (messages.length === 0) throw badRequest("`messages` must contain at least one message.", "messages");
  return { kind: "chat", ...sampling, messages, addGenerationPrompt, continueFinalMessage, templateKwargs };
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
  const before = beforeValidatorsCommon(body);
  if (before) throw validationError([before]);
  if (body.prompt === undefined || body.prompt === null) {
    if (body.prompt_embeds === undefined || body.prompt_embeds === null)
      throw validationError([validatorIssue(EMPTY_PROMPT, body)]);
    throw notImplemented("`prompt_embeds` is not supported by the mock engine.", "prompt_embeds");
  }
  const f = new Fields(body);
  const prompt = readPrompt(f, body);
  const sampling = readSampling(f, "completion");
  f.bool("add_special_tokens");
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
      returnTokenStrs: boolean;
    };

/** `/tokenize` takes TokenizeCompletionRequest or TokenizeChatRequest (chosen by `messages`). */
export function parseTokenizeRequest(body: JsonObject): TokenizeRequest {
  const f = new Fields(body);
  const model = f.str("model") ?? null;
  const returnTokenStrs = f.bool("return_token_strs") ?? false;
  f.bool("add_special_tokens");
  if (body.messages !== undefined) {
    if (body.continue_final_message && body.add_generation_prompt)
      throw validationError([
        validatorIssue("Cannot set both `continue_final_message` and `add_generation_prompt` to True.", body),
      ]);
    const messages = readMessages(f, body);
    const addGenerationPrompt = f.bool("add_generation_prompt") ?? true;
    const continueFinalMessage = f.bool("continue_final_message") ?? false;
    const templateKwargs = f.dict("chat_template_kwargs") ?? {};
    if (f.issues.length > 0) throw validationError(f.issues);
    checkGenerationPrompt(addGenerationPrompt, continueFinalMessage);
    return {
      kind: "chat",
      model,
      messages,
      addGenerationPrompt,
      continueFinalMessage,
      templateKwargs,
      returnTokenStrs,
    };
  }
  if (body.prompt === undefined)
    f.issues.push({ type: "missing", loc: ["body", "prompt"], msg: "Field required", input: body });
  const prompt = f.str("prompt");
  if (f.issues.length > 0 || prompt === undefined) throw validationError(f.issues);
  return { kind: "completion", model, prompt, returnTokenStrs };
}

export function parseDetokenizeRequest(body: JsonObject): { model: string | null; tokens: number[] } {
  const f = new Fields(body);
  const model = f.str("model") ?? null;
  if (body.tokens === undefined)
    f.issues.push({ type: "missing", loc: ["body", "tokens"], msg: "Field required", input: body });
  const tokens = f.intList("tokens");
  if (f.issues.length > 0 || tokens === undefined) throw validationError(f.issues);
  return { model, tokens };
}

export interface LimitsConfig {
  maxModelLen: number;
  maxLogprobs: number;
}

/**
 * The serving-time checks, in vLLM's order: context length (renderer), then the
 * SamplingParams checks. Returns the effective max_tokens.
 */
export function checkLimits(req: GenerationRequest, promptLen: number, limits: LimitsConfig): number {
  const { maxModelLen } = limits;
  if (req.maxTokens !== null && req.maxTokens > maxModelLen)
    throw badRequest(
      `max_tokens=${req.maxTokens} cannot be greater than max_model_len=${maxModelLen}.`,
      "max_tokens",
    );
  const requested = req.maxTokens ?? 0;
  if (promptLen > maxModelLen - requested)
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${requested} output tokens and your prompt contains ${promptLen} input tokens, for a total of ${promptLen + requested} tokens. Please reduce the length of the input prompt or the number of requested output tokens.`,
      "input_tokens",
    );
  if (promptLen >= maxModelLen)
    throw badRequest(
      `The decoder prompt (length ${promptLen}) plus the number of requested output tokens (at least 1) is longer than the maximum model length of ${maxModelLen}.`,
      "input_tokens",
    );
  const maxTokens = req.maxTokens ?? maxModelLen - promptLen;

  if (req.n !== 1) {
    if (req.n < 1) throw badRequest(`n must be at least 1, got ${req.n}.`, "n");
    throw badRequest(`n=${req.n} is not supported by the mock engine; only n=1.`, "n");
  }
  if (req.temperature !== null && req.temperature < 0)
    throw badRequest(`temperature must be non-negative, got ${pyFloatRepr(req.temperature)}.`, "temperature");
  if (req.topP !== null && !(req.topP > 0 && req.topP <= 1))
    throw badRequest(`top_p must be in (0, 1], got ${pyFloatRepr(req.topP)}.`, "top_p");
  if (req.topK !== null && req.topK < -1)
    throw badRequest(`top_k must be 0 (disable), or at least 1, got ${req.topK}.`, "top_k");
  if (req.minP !== null && !(req.minP >= 0 && req.minP <= 1))
    throw badRequest(`min_p must be in [0, 1], got ${pyFloatRepr(req.minP)}.`, "min_p");
  if (maxTokens < 1) throw badRequest(`max_tokens must be at least 1, got ${maxTokens}.`, "max_tokens");
  if (req.minTokens < 0)
    throw badRequest(`min_tokens must be greater than or equal to 0, got ${req.minTokens}.`, "min_tokens");
  if (req.minTokens > maxTokens)
    throw badRequest(
      `min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${req.minTokens}.`,
      "min_tokens",
    );
  // -1 means the whole vocabulary, which the default cap of 20 refuses.
  const cap = limits.maxLogprobs;
  if (req.logprobs !== null) {
    if (req.logprobs < 0 && !(req.kind === "chat" && req.logprobs === -1))
      throw badRequest(`logprobs must be non-negative, got ${req.logprobs}.`, "logprobs");
    const wanted = req.logprobs === -1 ? VOCAB_SIZE : req.logprobs;
    if (cap >= 0 && wanted > cap)
      throw badRequest(
        `Requested sample logprobs of ${wanted}, which is greater than max allowed: ${cap}`,
        "logprobs",
      );
  }
  if (req.promptLogprobs !== null) {
    const wanted = req.promptLogprobs === -1 ? VOCAB_SIZE : req.promptLogprobs;
    if (cap >= 0 && wanted > cap)
      throw badRequest(
        `Requested prompt logprobs of ${wanted}, which is greater than max allowed: ${cap}`,
        "prompt_logprobs",
      );
  }
  return maxTokens;
}
