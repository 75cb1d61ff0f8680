// Token in, token out: prompts go to the engine as token ids and come back as the exact ids it
// sampled, with their logprobs, so an episode's token log is what the model saw and produced
// and a trainer never re-tokenizes text. vLLM: /v1/completions with a token-id prompt and
// return_token_ids; llama.cpp: /completion with return_tokens. The ids inserted between turns
// (closing the assistant turn, the next user message, the generation prompt and prefill) are a
// chat-template delta rendered by the engine itself, so they follow the model's own template.
import type { ChatMessage } from "../rollout/prompt.ts";
import { onParentAbort } from "./deadline.ts";
import { type Dialect, serverRoot } from "./engine.ts";
import { EngineError, type RequestOptions, requestJson } from "./http.ts";
import { type ChatPolicy, checkFinishReason, samplingFields } from "./openai-chat.ts";
import type { SamplingParams } from "./policy.ts";

export interface TokenSample {
  /** Exactly the ids the engine sampled, the stop token included when it reports it. */
  ids: number[];
  /** The sampled token's logprob at each of `ids`. */
  logprobs: number[];
  /** The generated text as the engine decoded it (special tokens skipped). */
  text: string;
  finishReason: string;
  /** The prompt ids as the engine saw them, when it echoes them (vLLM's prompt_token_ids). */
  promptIds: number[] | null;
  /** Prompt tokens the engine reused from its cache, when it reports it (llama.cpp). */
  cachedTokens: number | null;
  /** The engine echoed a prompt that is not the one sent (never expected). */
  promptDrift?: boolean;
}

/** Extra-body fields for the chat route only; token requests go to the completions route. */
const CHAT_ONLY_FIELDS = new Set([
  "chat_template",
  "chat_template_kwargs",
  "continue_final_message",
  "add_generation_prompt",
  "messages",
]);

/** A fixed system message the next user block is rendered after (its delta is the block). */
const TEMPLATE_NOT_PREFIX =
  "the chat template renders a conversation differently once a user message follows; token mode needs a template that appends each message";

const ANCHOR: ChatMessage = { role: "system", content: "x" };
/** Content whose end marks where the template closes an assistant turn. */
const MARK = "\u2063rollgym-end-of-content\u2063";

function isIdList(value: unknown): value is number[] {
  return Array.isArray(value) && value.every((v) => Number.isSafeInteger(v) && v >= 0);
}

function startsWith(ids: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > ids.length) return false;
  for (let i = 0; i < prefix.length; i++) if (ids[i] !== prefix[i]) return false;
  return true;
}

type Options = RequestOptions;

export class TokenEngine {
  private readonly policy: ChatPolicy;
  private readonly dialect: Dialect;
  /**
   * Per-engine constants (what closes an assistant turn, the anchor's render, prefill ids),
   * computed once without any caller's signal, so one cancelled rollout cannot poison them;
   * a failed computation is forgotten and tried again by the next caller.
   */
  private readonly constants = new Map<string, Promise<unknown>>();
  /** Requests whose echoed prompt ids differed from the log they were sent from. */
  promptDrift = 0;
  /** Requests whose answer echoed the prompt ids at all (vLLM's prompt_token_ids), for evidence. */
  promptEchoes = 0;

  constructor(policy: ChatPolicy) {
    this.policy = policy;
    this.dialect = policy.engineDialect;
  }

  private constant<T>(key: string, compute: () => Promise<T>): Promise<T> {
    let value = this.constants.get(key) as Promise<T> | undefined;
    if (!value) {
      const computed = compute();
      value = computed;
      this.constants.set(key, computed);
      computed.catch(() => {
        if (this.constants.get(key) === computed) this.constants.delete(key);
      });
    }
    return value;
  }

  /** Waits for `value` unless `signal` aborts first (the shared computation goes on). */
  private async orAbort<T>(value: Promise<T>, signal?: AbortSignal): Promise<T> {
    if (!signal) return value;
    signal.throwIfAborted();
    // One listener per rollout signal, shared with the engine requests.
    let leave = () => {};
    const aborted = new Promise<never>((_, reject) => {
      leave = onParentAbort(signal, () => reject(signal.reason));
    });
    try {
      return await Promise.race([value, aborted]);
    } finally {
      leave();
    }
  }

  /** Context length the log plus max_tokens must fit. */
  get limit(): number | null {
    return this.policy.meter?.limit ?? null;
  }

  /**
   * The first prompt: the chat template with its generation prompt, rendered once by the
   * engine, then the prefill's ids (RAGEN appends "<think>" to the rendered text the same way).
   */
  async firstPrompt(
    messages: readonly ChatMessage[],
    prefill: string,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const [rendered, tail] = await Promise.all([
      this.dialect === "vllm"
        ? this.templateIds(messages, true, affinity, signal)
        : this.templateText(messages, true, affinity, signal).then((t) => this.tokenize(t, affinity, signal)),
      this.prefillIds(prefill, affinity, signal),
    ]);
    return [...rendered, ...tail];
  }

  /**
   * The ids to append after a turn's sampled ids so the log continues with `user`, the
   * generation prompt and `prefill`: the rest of the template's closing of the assistant turn
   * (all of it when the model stopped without the end-of-turn token), then the user block as
   * the template renders it after any earlier message, then the prefill.
   */
  async continuation(
    lastSampled: number | undefined,
    user: string,
    prefill: string,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const [closing, block, tail] = await Promise.all([
      this.closingIds(affinity, signal),
      this.userBlock(user, affinity, signal),
      this.prefillIds(prefill, affinity, signal),
    ]);
    const close = closing.length > 0 && lastSampled === closing[0] ? closing.slice(1) : closing;
    return [...close, ...block, ...tail];
  }

  /** The user block and generation prompt: the template of [anchor, user] less that of [anchor]. */
  private async userBlock(user: string, affinity: string, signal?: AbortSignal): Promise<number[]> {
    const messages = [ANCHOR, { role: "user" as const, content: user }];
    if (this.dialect === "vllm") {
      const [anchor, full] = await Promise.all([
        this.orAbort(
          this.constant("anchor-ids", () => this.templateIds([ANCHOR], false, affinity)),
          signal,
        ),
        this.templateIds(messages, true, affinity, signal),
      ]);
      if (!startsWith(full, anchor)) throw new EngineError(TEMPLATE_NOT_PREFIX, 422);
      return full.slice(anchor.length);
    }
    const [anchor, full] = await Promise.all([
      this.orAbort(
        this.constant("anchor-text", () => this.templateText([ANCHOR], false, affinity)),
        signal,
      ),
      this.templateText(messages, true, affinity, signal),
    ]);
    if (!full.startsWith(anchor)) throw new EngineError(TEMPLATE_NOT_PREFIX, 422);
    return this.tokenize(full.slice(anchor.length), affinity, signal);
  }

  private prefillIds(prefill: string, affinity: string, signal?: AbortSignal): Promise<number[]> {
    if (prefill === "") return Promise.resolve([]);
    return this.orAbort(
      this.constant(`prefill:${prefill}`, () => this.tokenize(prefill, affinity)),
      signal,
    );
  }

  /**
   * What the template writes between an assistant message's content and the next message
   * (e.g. "<|im_end|>\n"), as ids: the text after a marked content up to the next user block.
   */
  private closingIds(affinity: string, signal?: AbortSignal): Promise<number[]> {
    return this.orAbort(
      this.constant("closing", () => this.computeClosing(affinity)),
      signal,
    );
  }

  private async computeClosing(affinity: string, signal?: AbortSignal): Promise<number[]> {
    const user: ChatMessage = { role: "user", content: "x" };
    const [full, withUser, alone] = await Promise.all([
      this.renderedText([ANCHOR, user, { role: "assistant", content: MARK }, user], affinity, signal),
      this.renderedText([ANCHOR, user], affinity, signal),
      this.renderedText([ANCHOR], affinity, signal),
    ]);
    const at = full.lastIndexOf(MARK);
    const block = withUser.startsWith(alone) ? withUser.slice(alone.length) : null;
    const after = at < 0 ? "" : full.slice(at + MARK.length);
    if (at < 0 || block === null || !after.endsWith(block)) {
      throw new EngineError("cannot tell where the chat template closes an assistant turn", 422);
    }
    const closing = after.slice(0, after.length - block.length);
    return closing === "" ? [] : this.tokenize(closing, affinity, signal);
  }

  /** The template's text for `messages` without a generation prompt. */
  private async renderedText(
    messages: readonly ChatMessage[],
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    if (this.dialect === "llamacpp") return this.templateText(messages, false, affinity, signal);
    return this.decode(await this.templateIds(messages, false, affinity, signal), affinity, signal);
  }

  /**
   * A turn's content as the template shows it: the text the engine decoded (special tokens
   * skipped), plus the end token's text when the model stopped on an end-of-generation token
   * other than the template's own end-of-turn (llama.cpp stops on any of several).
   */
  async assistantContent(
    text: string,
    lastId: number | undefined,
    stopped: boolean,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    if (!stopped || lastId === undefined) return text;
    const closing = await this.closingIds(affinity, signal);
    if (closing[0] === lastId) return text;
    const end = await this.orAbort(
      this.constant(`token:${lastId}`, () => this.decode([lastId], affinity)),
      signal,
    );
    return text + end;
  }

  /** Samples from `promptIds`. Retried like chat requests (aborts, outages). */
  async generate(
    promptIds: readonly number[],
    sampling: SamplingParams,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<TokenSample> {
    const { model, headers, connections, timeoutMs, grammar, extraBody } = this.policy.transport;
    // The extra body goes along except what only the chat route reads.
    const extra = Object.fromEntries(Object.entries(extraBody).filter(([key]) => !CHAT_ONLY_FIELDS.has(key)));
    return this.policy.routed(affinity, signal, async (url) => {
      const fields = samplingFields(sampling, this.dialect);
      const options = { signal, timeoutMs, headers, connections };
      const sample =
        this.dialect === "vllm"
          ? await this.vllmSample(url, options, {
              model,
              prompt: promptIds,
              ...fields,
              logprobs: 0,
              return_token_ids: true,
              ...(grammar ? { structured_outputs: { grammar } } : {}),
              ...extra,
            })
          : await this.llamaSample(url, options, {
              prompt: promptIds,
              ...fields,
              n_predict: sampling.max_tokens,
              n_probs: 1,
              return_tokens: true,
              cache_prompt: true,
              ...(grammar ? { grammar } : {}),
              ...extra,
            });
      checkFinishReason(sample.finishReason);
      if (sample.promptIds) {
        this.promptEchoes++;
        const same = sample.promptIds.length === promptIds.length && startsWith(sample.promptIds, promptIds);
        if (!same) {
          this.promptDrift++;
          sample.promptDrift = true;
        }
      }
      return sample;
    });
  }

  /** Text of `ids` with special tokens kept, as the engine decodes them. */
  async decode(ids: readonly number[], affinity: string, signal?: AbortSignal): Promise<string> {
    const { model } = this.policy.transport;
    return this.send(affinity, signal, async (url, options) => {
      const vllm = this.dialect === "vllm";
      const body = (await requestJson(
        "POST",
        `${serverRoot(url)}/detokenize`,
        vllm ? { model, tokens: ids } : { tokens: ids },
        options,
      )) as { prompt?: unknown; content?: unknown };
      const text = vllm ? body.prompt : body.content;
      if (typeof text !== "string") throw new EngineError("/detokenize answered without text", 502);
      return text;
    });
  }

  /**
   * The chat template's own text for a whole conversation (earlier turns closed), to compare
   * with the decoded log: where they differ, the template rewrites earlier turns (Qwen3 drops
   * old <think> blocks) and a model trained on the log saw a context inference never renders.
   */
  async renderText(
    messages: readonly ChatMessage[],
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    // A user message after a final assistant turn makes every template close it (llama.cpp
    // leaves a final assistant message open, as a prefill).
    const last = messages[messages.length - 1];
    const closed: readonly ChatMessage[] =
      last?.role === "assistant" ? [...messages, { role: "user", content: "x" }] : messages;
    return this.renderedText(closed, affinity, signal);
  }

  /** chat_template / chat_template_kwargs from the extra body: they change every render. */
  private kwargs(): Record<string, unknown> {
    return this.policy.transport.rendering;
  }

  /** Ids of the chat template applied to `messages` (vLLM's /tokenize with messages). */
  private async templateIds(
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const { model } = this.policy.transport;
    return this.send(affinity, signal, async (url, options) => {
      const body = (await requestJson(
        "POST",
        `${serverRoot(url)}/tokenize`,
        { model, messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
        options,
      )) as { tokens?: unknown };
      if (!isIdList(body.tokens)) throw new EngineError("/tokenize answered without token ids", 502);
      return body.tokens;
    });
  }

  /** Text of the chat template applied to `messages` (llama.cpp's /apply-template). */
  private async templateText(
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    return this.send(affinity, signal, async (url, options) => {
      const body = (await requestJson(
        "POST",
        `${serverRoot(url)}/apply-template`,
        { messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
        options,
      )) as { prompt?: unknown };
      if (typeof body.prompt !== "string")
        throw new EngineError("/apply-template answered without a prompt", 502);
      return body.prompt;
    });
  }

  /** Ids of plain text, special-token text parsed as special tokens, no BOS added. */
  private async tokenize(text: string, affinity: string, signal?: AbortSignal): Promise<number[]> {
    const { model } = this.policy.transport;
    return this.send(affinity, signal, async (url, options) => {
      const body = (await requestJson(
        "POST",
        `${serverRoot(url)}/tokenize`,
        this.dialect === "vllm"
          ? { model, prompt: text, add_special_tokens: false }
          : { content: text, add_special: false, parse_special: true },
        options,
      )) as { tokens?: unknown };
      if (!isIdList(body.tokens)) throw new EngineError("/tokenize answered without token ids", 502);
      return body.tokens;
    });
  }

  /** One request on a routed replica with this engine's headers and timeout. */
  private send<T>(
    affinity: string,
    signal: AbortSignal | undefined,
    run: (url: string, options: Options) => Promise<T>,
  ): Promise<T> {
    const { headers, connections, timeoutMs } = this.policy.transport;
    return this.policy.routed(
      affinity,
      signal,
      (url) => run(url, { signal, timeoutMs, headers, connections }),
      "aux",
    );
  }

  private async vllmSample(
    url: string,
    options: Options,
    body: Record<string, unknown>,
  ): Promise<TokenSample> {
    const answer = (await requestJson("POST", `${url}/completions`, body, options)) as {
      choices?: {
        text?: unknown;
        token_ids?: unknown;
        prompt_token_ids?: unknown;
        finish_reason?: unknown;
        logprobs?: { token_logprobs?: unknown } | null;
      }[];
    };
    const choice = answer.choices?.[0];
    if (!choice) throw new EngineError("the response has no choices", 502);
    if (!isIdList(choice.token_ids)) {
      throw new EngineError(
        "the engine returned no token_ids: token mode needs vLLM >= 0.10.2 (return_token_ids)",
        422,
      );
    }
    const logprobs = choice.logprobs?.token_logprobs;
    if (!Array.isArray(logprobs) || logprobs.length !== choice.token_ids.length) {
      throw new EngineError(
        `the engine returned ${Array.isArray(logprobs) ? logprobs.length : "no"} logprobs for ${choice.token_ids.length} tokens`,
        502,
      );
    }
    return {
      ids: choice.token_ids,
      logprobs: logprobs.map((v) => (typeof v === "number" ? v : Number.NaN)),
      text: typeof choice.text === "string" ? choice.text : "",
      finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "unknown",
      promptIds: isIdList(choice.prompt_token_ids) ? choice.prompt_token_ids : null,
      cachedTokens: null,
    };
  }

  private async llamaSample(
    url: string,
    options: Options,
    body: Record<string, unknown>,
  ): Promise<TokenSample> {
    const answer = (await requestJson("POST", `${serverRoot(url)}/completion`, body, options)) as {
      content?: unknown;
      tokens?: unknown;
      stop_type?: unknown;
      completion_probabilities?: { id?: unknown; logprob?: unknown }[];
      timings?: { cache_n?: unknown };
    };
    const tokens = answer.tokens;
    if (!isIdList(tokens)) throw new EngineError("llama.cpp returned no tokens (return_tokens)", 502);
    const probabilities = answer.completion_probabilities ?? [];
    if (probabilities.length !== tokens.length) {
      throw new EngineError(
        `llama.cpp returned ${probabilities.length} logprobs for ${tokens.length} tokens`,
        502,
      );
    }
    probabilities.forEach((p, i) => {
      if (p.id !== tokens[i]) throw new EngineError(`llama.cpp's logprob ${i} is for another token`, 502);
    });
    const finishReason =
      answer.stop_type === "limit"
        ? "length"
        : answer.stop_type === "eos" || answer.stop_type === "word"
          ? "stop"
          : String(answer.stop_type);
    const cached = answer.timings?.cache_n;
    return {
      ids: tokens,
      logprobs: probabilities.map((p) => (typeof p.logprob === "number" ? p.logprob : Number.NaN)),
      text: typeof answer.content === "string" ? answer.content : "",
      finishReason,
      promptIds: null,
      cachedTokens: typeof cached === "number" ? cached : null,
    };
  }
}
