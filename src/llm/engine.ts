// What rollgym needs to know about an inference engine before the first turn: which dialect it
// speaks (vLLM or llama.cpp, told apart by their routes), its context length, and how to count
// a chat prompt's tokens exactly as its chat route will render them.
import { isPlainObject } from "../../protocol/plain-object.ts";
import type { ChatMessage } from "./chat.ts";
import type { HistoryJson } from "./history-json.ts";
import { type EngineConnections, EngineError, requestJson, UnusableAnswer } from "./http.ts";

export type Dialect = "vllm" | "llamacpp";

export interface EngineInfo {
  dialect: Dialect;
  /** Served model names. */
  models: string[];
  /** Context length per sequence (vLLM max_model_len; llama.cpp's per-slot n_ctx), when reported. */
  contextLength: number | null;
  /** What looked wrong but does not stop a rollout (a forced dialect the routes contradict), each with its fix. */
  warnings: string[];
}

/** The server root: the base URL without its OpenAI `/v1` suffix (vLLM's /tokenize, llama.cpp's /props live there). */
export function serverRoot(baseURL: string): string {
  return baseURL.replace(/\/+$/, "").replace(/\/v1$/, "");
}

const PROBE_TIMEOUT_MS = 10_000;

function record(value: unknown): Record<string, unknown> {
  return isPlainObject(value) ? value : {};
}

function positiveInt(value: unknown): number | null {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0 ? value : null;
}

/**
 * GET {base}/models. A 404 from a base URL without /v1 is the usual slip (the server root
 * given for the OpenAI base URL): the error then says which URL to use instead.
 */
async function listModels(baseURL: string, options: Parameters<typeof requestJson>[3]): Promise<unknown> {
  const base = baseURL.replace(/\/+$/, "");
  try {
    return await requestJson("GET", `${base}/models`, undefined, options);
  } catch (error) {
    if (!(error instanceof EngineError) || error.status !== 404 || /\/v1$/.test(base)) throw error;
    const answers = await requestJson("GET", `${base}/v1/models`, undefined, options).then(
      () => true,
      () => false,
    );
    throw new EngineError(
      answers
        ? `${error.message} at ${base}/models; the OpenAI API answers at ${base}/v1: use --llm ${base}/v1`
        : `${error.message} at ${base}/models; an OpenAI-compatible base URL usually ends in /v1 (e.g. ${base}/v1)`,
      404,
    );
  }
}

/** Reads the served models, the dialect (unless given) and the context length of one endpoint. */
export async function describeEngine(
  baseURL: string,
  dialect: Dialect | "auto",
  headers: Record<string, string>,
  signal?: AbortSignal,
  connections?: EngineConnections,
): Promise<EngineInfo> {
  const options = { signal, timeoutMs: PROBE_TIMEOUT_MS, headers, connections };
  const list = record(await listModels(baseURL, options));
  const cards = Array.isArray(list.data) ? list.data.map(record) : [];
  const models = cards.map((c) => c.id).filter((id): id is string => typeof id === "string");

  // llama.cpp answers GET /props with its slot settings; vLLM has no such route (404).
  let props: Record<string, unknown> | null = null;
  let propsRefusal = "";
  if (dialect !== "vllm") {
    try {
      props = record(await requestJson("GET", `${serverRoot(baseURL)}/props`, undefined, options));
    } catch (error) {
      if (!(error instanceof EngineError) || error.status === null || error.status >= 500) throw error;
      propsRefusal = error.message;
    }
  }
  const llamaProps = props !== null && "default_generation_settings" in props;
  const detected: Dialect = dialect !== "auto" ? dialect : llamaProps ? "llamacpp" : "vllm";
  const contextLength =
    detected === "llamacpp"
      ? positiveInt(record(props?.default_generation_settings).n_ctx)
      : (cards.map((c) => positiveInt(c.max_model_len)).find((n) => n !== null) ?? null);
  const warnings: string[] = [];
  if (dialect === "llamacpp" && !llamaProps) {
    // Sent in llama.cpp's dialect, vLLM ignores repeat_penalty and fills the model's own penalty.
    warnings.push(
      `rollgym.llm.dialect=llamacpp, but ${serverRoot(baseURL)}/props ${propsRefusal ? `answered ${propsRefusal}` : "has no default_generation_settings"}: ` +
        "this does not look like a llama.cpp server (or a gateway in front hides /props, and with it the context length). " +
        "On vLLM the llama.cpp dialect's repeat_penalty is ignored and the model's generation_config " +
        "repetition penalty applies; set rollgym.llm.dialect=auto (or vllm).",
    );
  }
  return { dialect: detected, models, contextLength, warnings };
}

/**
 * An engine's 404/405 for an auxiliary route, restated with the route and what to do: behind a
 * gateway that forwards only /v1/*, a bare "HTTP 404: Not Found" names neither. Anything else
 * is returned unchanged.
 */
export function missingRoute(error: unknown, route: string, fix: string): unknown {
  if (!(error instanceof EngineError) || (error.status !== 404 && error.status !== 405)) return error;
  return new EngineError(`POST ${route} answered ${error.message}; ${fix}`, error.status);
}

export interface TokenCounterOptions {
  model: string;
  dialect: Dialect;
  headers: Record<string, string>;
  timeoutMs: number;
  /** "continue": the prefill is rendered as an open assistant message, as the chat request sends it. */
  prefill: "continue" | "none";
  /** Body fields the chat requests carry that change the rendering (chat_template, chat_template_kwargs). */
  rendering?: Record<string, unknown>;
  /** Entries kept; a turn's prompt is counted once even when its request is retried. */
  cacheSize?: number;
  /** The policy's connections. */
  connections?: EngineConnections;
}

/**
 * Exact prompt token counts from the engine itself, one request each: vLLM's /tokenize with
 * `messages`, llama.cpp's /v1/chat/completions/input_tokens. Counts are cached by prompt, and
 * a prompt already being counted is not asked again: a group's members start on the same
 * state, so their first prompts arrive together and share one request.
 */
export class EngineTokenCounter {
  private readonly options: TokenCounterOptions;
  private readonly cache = new Map<string, number>();
  private readonly asking = new Map<string, Promise<number>>();
  /** Count requests sent, for stats. */
  requests = 0;

  constructor(options: TokenCounterOptions) {
    this.options = options;
  }

  /**
   * The count for `messages` + `prefill`: cached, shared with a request already asking, or
   * asked through `route`, which picks the replica (and its lease) and sends on it. A shared
   * request that fails for its own caller's reason (an abort) is asked again.
   */
  async count(
    messages: readonly ChatMessage[],
    prefill: string,
    signal: AbortSignal | undefined,
    route: (send: (baseURL: string) => Promise<number>) => Promise<number>,
    /** The episode's history as JSON (the same key, without serialising what it holds again). */
    history?: HistoryJson,
  ): Promise<number> {
    const key =
      history === undefined
        ? JSON.stringify([messages, prefill])
        : `[[${history.elements(messages)}],${JSON.stringify(prefill)}]`;
    const cached = this.cache.get(key);
    if (cached !== undefined) return cached;
    const pending = this.asking.get(key);
    if (pending !== undefined) {
      try {
        return await pending;
      } catch (error) {
        if (signal?.aborted) throw error;
      }
    }
    const asked = route((baseURL) => {
      this.requests++;
      return this.fetchCount(baseURL, messages, prefill, signal);
    });
    this.asking.set(key, asked);
    try {
      const count = await asked;
      const limit = this.options.cacheSize ?? 4096;
      if (this.cache.size >= limit) this.cache.delete(this.cache.keys().next().value as string);
      this.cache.set(key, count);
      return count;
    } finally {
      if (this.asking.get(key) === asked) this.asking.delete(key);
    }
  }

  private async fetchCount(
    baseURL: string,
    messages: readonly ChatMessage[],
    prefill: string,
    signal?: AbortSignal,
  ): Promise<number> {
    const { model, dialect, headers, timeoutMs, rendering, connections } = this.options;
    // An empty prefill is RAGEN's count: the template with its generation prompt, nothing after.
    const continued = this.options.prefill === "continue" && prefill !== "";
    const chat = continued ? [...messages, { role: "assistant", content: prefill }] : [...messages];
    const switches = continued
      ? { add_generation_prompt: false, continue_final_message: true }
      : { add_generation_prompt: true };
    const options = { signal, timeoutMs, headers, connections };
    const root = serverRoot(baseURL);
    if (dialect === "vllm") {
      const body = record(
        await requestJson(
          "POST",
          `${root}/tokenize`,
          { model, messages: chat, ...switches, ...rendering },
          options,
        ).catch((error: unknown) => {
          throw missingRoute(
            error,
            `${root}/tokenize`,
            "rollgym counts prompts with vLLM's /tokenize, which sits at the server root, outside /v1: " +
              "let the gateway forward /tokenize too, or set rollgym.llm.count_tokens=usage (chat mode)",
          );
        }),
      );
      const count = positiveInt(body.count) ?? (Array.isArray(body.tokens) ? body.tokens.length : null);
      if (count === null) throw new UnusableAnswer("/tokenize answered without a token count");
      return count;
    }
    // llama.cpp counts a chat body exactly as its chat route renders and tokenizes it.
    const route = `${baseURL.replace(/\/+$/, "")}/chat/completions/input_tokens`;
    const body = record(
      await requestJson("POST", route, { model, messages: chat, ...switches, ...rendering }, options).catch(
        (error: unknown) => {
          throw missingRoute(
            error,
            route,
            "rollgym counts prompts with llama.cpp's input_tokens route (recent builds): update llama-server, " +
              "or set rollgym.llm.count_tokens=usage (chat mode)",
          );
        },
      ),
    );
    const count = positiveInt(body.input_tokens);
    if (count === null)
      throw new UnusableAnswer("/v1/chat/completions/input_tokens answered without a count");
    return count;
  }
}
