// Token in, token out: prompts go to the engine as token ids and come back as the exact ids it
// sampled, with their logprobs, so an episode's token log is what the model saw and produced
// and a trainer never re-tokenizes text. vLLM: /v1/completions with a token-id prompt and
// return_token_ids; llama.cpp: /completion with return_tokens. The ids inserted between turns
// (closing the assistant turn, the next user message, the generation prompt and prefill) are a
// chat-template delta rendered by the engine itself, so they follow the model's own template.
import type { ChatMessage, SamplingParams } from "./chat.ts";
import { onParentAbort, type PauseClock } from "./deadline.ts";
import { type Dialect, missingRoute, serverRoot } from "./engine.ts";
import { type EngineUpdates, type Sent, UpdateInterrupted } from "./engine-updates.ts";
import { checkFinishReason, samplingFields } from "./generation.ts";
import {
  type EngineConnections,
  EngineError,
  type RequestOptions,
  requestEvents,
  requestJson,
  UnusableAnswer,
} from "./http.ts";
import type { TurnVersions } from "./versions.ts";

export interface TokenSample {
  /** Exactly the ids the engine sampled, the stop token included when it reports it. */
  ids: number[];
  /** The sampled token's logprob at each of `ids`; NaN where the engine reported none. */
  logprobs: number[];
  /** The generated text as the engine decoded it (special tokens skipped). */
  text: string;
  finishReason: string;
  /**
   * The engine stopped on a stop string: its text then ends before the string (or inside the
   * token that completed it) while `ids` hold every sampled token, so the text is decoded from
   * the ids instead.
   */
  stoppedOnString: boolean;
  /** The prompt ids as the engine saw them, when it echoes them (vLLM's prompt_token_ids). */
  promptIds: number[] | null;
  /** Prompt tokens the engine reused from its cache, when it reports it (llama.cpp). */
  cachedTokens: number | null;
  /** The engine echoed a prompt that is not the one sent (never expected). */
  promptDrift?: boolean;
  /**
   * The weight version ordinal that sampled each of `ids`: exact per segment when a weight
   * update interrupted the turn and it was continued, or held it whole (VersionBook.stamp); in a
   * turn that spans a keep-mode pause (turnVersions differ) each id has the dispatch ordinal, a
   * lower bound (docs/rollouts.md).
   */
  versions: number[];
  /** The versions at the first segment's dispatch and at the last one's completion. */
  turnVersions: TurnVersions;
  /** Segments the turn was sampled in: 1, plus one per weight-update interruption it was continued after. */
  segments: number;
}

/** One request's answer: a whole sample, or the part sampled before a weight update interrupted it. */
type Segment = Omit<TokenSample, "versions" | "turnVersions" | "segments"> & {
  interrupted: boolean;
  stamp: TurnVersions;
};

/**
 * Extra-body fields for the chat route only: vLLM's chat request model has them and its
 * completions model, where token requests go, does not (include_reasoning among them). The
 * rendering ones reach the template through the render requests instead.
 */
const CHAT_ONLY_FIELDS = new Set([
  "chat_template",
  "chat_template_kwargs",
  "continue_final_message",
  "add_generation_prompt",
  "messages",
  "include_reasoning",
  "reasoning_effort",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "documents",
  "mm_processor_kwargs",
  "media_io_kwargs",
]);

/** What to do when a route at the server root answers 404/405 (a gateway that forwards only /v1/*). */
const ROOT_ROUTES_FIX =
  "token mode needs the engine's routes at the server root, outside /v1 (vLLM: /tokenize, /detokenize; " +
  "llama.cpp also /apply-template, /completion): let the gateway forward them too, " +
  "point rollgym.llm.base_url at the engine itself, or play in chat mode";

/** How a turn ended, for what the log appends after it. */
export interface TurnEnd {
  /** The last sampled id. */
  lastId: number | undefined;
  /** The engine stopped on an end-of-generation token (not a stop string, not the length limit). */
  stoppedOnToken: boolean;
}

/** A probe conversation's system message, only to find the template's closing of a turn (never in a log). */
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

/**
 * Which distribution the logged logprobs come from, for the episode file header: llama.cpp is
 * asked for probabilities after its sampling chain; vLLM's depend on how it was started, which
 * its API does not tell.
 */
export function logprobsSource(dialect: Dialect): string {
  return dialect === "llamacpp"
    ? "sampling distribution (llama.cpp post_sampling_probs)"
    : "vLLM's --logprobs-mode: raw_logprobs (before temperature, top-k/p, min-p) unless the engine was started with --logprobs-mode processed_logprobs";
}

/** A start-up warning when the logged logprobs may not be those of the sampling distribution. */
export function logprobsWarning(dialect: Dialect, sampling: Omit<SamplingParams, "seed">): string | null {
  if (dialect !== "vllm") return null;
  const shaped = sampling.temperature !== 1 || sampling.top_p < 1 || sampling.top_k > 0 || sampling.min_p > 0;
  if (!shaped) return null;
  return (
    `token mode: vLLM logs raw logprobs (before temperature ${sampling.temperature}, top_p ${sampling.top_p}, top_k ${sampling.top_k}, min_p ${sampling.min_p}) ` +
    "unless it was started with --logprobs-mode processed_logprobs; start it so for logprobs of the distribution tokens were sampled from (recorded in the episode file header)"
  );
}

/** Settings the token engine needs to speak to the same replicas the same way as the chat policy. */
export interface EngineTransport {
  model: string;
  headers: Record<string, string>;
  connections: EngineConnections;
  timeoutMs: number;
  grammar: string | null;
  extraBody: Record<string, unknown>;
  rendering: Record<string, unknown>;
  /** Time paused by a weight update does not count against timeoutMs. */
  clock: PauseClock;
}

/** What the token engine uses of the chat policy it runs beside (ChatPolicy): transport, routing, context length. */
export interface TokenEngineHost {
  readonly engineDialect: Dialect;
  readonly meter: { readonly limit: number } | null;
  readonly transport: EngineTransport;
  /** Versions and the fallback's streaming per replica. */
  readonly versions: EngineUpdates;
  routed<T>(
    affinity: string | null,
    signal: AbortSignal | undefined,
    send: (url: string, attempt: number, sent: Sent) => Promise<T>,
    kind?: "turn" | "aux",
  ): Promise<T>;
}

export class TokenEngine {
  private readonly policy: TokenEngineHost;
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
  /** Turns continued from their sampled tokens after a weight update interrupted them. */
  continued = 0;
  /** Streamed llama.cpp answers that left out held tokens, asked again without streaming. */
  streamGaps = 0;

  constructor(policy: TokenEngineHost) {
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
        : this.templateText(messages, true, affinity, signal).then((t) => this.chatIds(t, affinity, signal)),
      this.prefillIds(prefill, affinity, signal),
    ]);
    return [...rendered, ...tail];
  }

  /**
   * The ids to append after a turn's sampled ids so the log continues with the next user
   * message, the generation prompt and `prefill`: what the chat template writes after the last
   * assistant turn when it renders the real conversation (`conversation` ends with that turn
   * and the new user message), so no text but the conversation's own enters the log, and
   * templates that move or repeat the system prompt put it where they render it. The template's
   * closing of the assistant turn is left out up to what the model sampled itself: its
   * end-of-turn token when the model stopped on it or on another end token, which then stands
   * in for it (docs/rollouts.md, "Token mode").
   */
  async continuation(
    conversation: readonly ChatMessage[],
    end: TurnEnd,
    prefill: string,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const last = conversation.length - 2;
    if (last < 0 || conversation[last].role !== "assistant" || conversation[last + 1].role !== "user") {
      throw new RangeError("a continuation follows an assistant turn and a user message");
    }
    const marked = conversation.map((m, i) => (i === last ? { ...m, content: MARK } : m));
    const [text, closing, tail] = await Promise.all([
      this.promptText(marked, affinity, signal),
      this.closingIds(affinity, signal),
      this.prefillIds(prefill, affinity, signal),
    ]);
    const at = text.lastIndexOf(MARK);
    if (at < 0) throw new EngineError("the chat template does not show the assistant turn's content", 422);
    const after = await this.tokenize(text.slice(at + MARK.length), affinity, signal);
    if (!startsWith(after, closing)) {
      throw new EngineError(
        "the chat template closes this assistant turn differently from the others; token mode cannot tell what follows it",
        422,
      );
    }
    const skip =
      closing.length > 0 &&
      (end.lastId === closing[0] ||
        (end.stoppedOnToken && (await this.endsTurn(closing[0], affinity, signal))))
        ? 1
        : 0;
    return [...after.slice(skip), ...tail];
  }

  /** Whether the template's closing starts with a special end-of-turn token (e.g. <|im_end|>, </s>, <|eot_id|>). */
  private async endsTurn(id: number, affinity: string, signal?: AbortSignal): Promise<boolean> {
    const text = await this.orAbort(
      this.constant(`token:${id}`, () => this.decode([id], affinity)),
      signal,
    );
    return /^<[^<>\s]+>$/.test(text);
  }

  /** The template's text for `messages` with its generation prompt. */
  private async promptText(
    messages: readonly ChatMessage[],
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    if (this.dialect === "llamacpp") return this.templateText(messages, true, affinity, signal);
    return this.decode(await this.templateIds(messages, true, affinity, signal), affinity, signal);
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
    let closing = closingText(full, withUser, alone);
    if (closing === null) {
      // Templates that write their generation prompt even when not asked (Llama 3's first
      // template) end every render with it; what they render for no messages is that prompt.
      const prompt = await this.renderedText([], affinity, signal).catch(() => "");
      const cut = (text: string) =>
        text.endsWith(prompt) ? text.slice(0, text.length - prompt.length) : null;
      const [f, w, a] = [cut(full), cut(withUser), cut(alone)];
      if (prompt !== "" && f !== null && w !== null && a !== null) closing = closingText(f, w, a);
    }
    if (closing === null)
      throw new EngineError("cannot tell where the chat template closes an assistant turn", 422);
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
   * Samples from `promptIds`. Retried like chat requests (aborts, outages). A weight update
   * that interrupts it (the fallback's abort, vLLM's /pause?mode=abort) does not lose what was
   * sampled: the turn goes on after the update from the prompt plus those ids, with max_tokens
   * lowered by their number, and the segments are joined (issue #22).
   */
  async generate(
    promptIds: readonly number[],
    sampling: SamplingParams,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<TokenSample> {
    const segments: Segment[] = [];
    let prompt: readonly number[] = promptIds;
    for (;;) {
      const left = sampling.max_tokens - (prompt.length - promptIds.length);
      const segment = await this.segment(prompt, { ...sampling, max_tokens: left }, affinity, signal);
      segments.push(segment);
      if (!segment.interrupted) break;
      prompt = [...prompt, ...segment.ids];
      if (prompt.length - promptIds.length >= sampling.max_tokens) {
        segment.finishReason = "length";
        break;
      }
      this.continued++;
    }
    const sample = joinSegments(segments);
    if (sample.stoppedOnString) sample.text = await this.decode(sample.ids, affinity, signal);
    else if (sample.segments > 1) {
      // Segment texts may split a character at the seam: the text is decoded from the ids,
      // without the end-of-turn token the engine leaves out of its own text.
      const ids = sample.finishReason === "stop" ? sample.ids.slice(0, -1) : sample.ids;
      sample.text = await this.decode(ids, affinity, signal);
    }
    return sample;
  }

  /** One request: a whole answer, or what was sampled before an update interrupted it. */
  private segment(
    promptIds: readonly number[],
    sampling: SamplingParams,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<Segment> {
    const { model, connections, timeoutMs, grammar, extraBody, clock } = this.policy.transport;
    // The extra body goes along except what only the chat route reads.
    const extra = Object.fromEntries(Object.entries(extraBody).filter(([key]) => !CHAT_ONLY_FIELDS.has(key)));
    const updates = this.policy.versions;
    return this.policy.routed(affinity, signal, async (url, _attempt, sent) => {
      const fields = samplingFields(sampling, this.dialect);
      const options = { signal: sent.signal, timeoutMs, headers: sent.headers, connections, clock };
      const stream = await updates.streams(url);
      const sample =
        this.dialect === "vllm"
          ? await this.vllmSample(
              url,
              options,
              {
                model,
                prompt: promptIds,
                ...fields,
                logprobs: 0,
                return_token_ids: true,
                ...(grammar ? { structured_outputs: { grammar } } : {}),
                ...extra,
                ...sent.body,
              },
              stream,
            )
          : await this.llamaSample(
              url,
              options,
              {
                prompt: promptIds,
                ...fields,
                n_predict: sampling.max_tokens,
                n_probs: 1,
                // Probabilities after the sampling chain (temperature, top-k/p, min-p), the
                // distribution the token was drawn from, as vLLM's processed_logprobs.
                post_sampling_probs: true,
                return_tokens: true,
                cache_prompt: true,
                ...(grammar ? { grammar } : {}),
                ...extra,
              },
              stream,
            );
      // vLLM's /pause?mode=abort ends a request with what it sampled: kept, as an interruption.
      const interrupted =
        sample.interrupted || (sample.finishReason === "abort" && sent.epoch !== updates.epoch);
      if (!interrupted) checkFinishReason(sample.finishReason);
      if (sample.promptIds) {
        this.promptEchoes++;
        const same = sample.promptIds.length === promptIds.length && startsWith(sample.promptIds, promptIds);
        if (!same) {
          this.promptDrift++;
          sample.promptDrift = true;
        }
      }
      const answered = interrupted ? undefined : { epoch: sent.epoch, url };
      return { ...sample, interrupted, stamp: updates.stamp(sent.version, answered) };
    });
  }

  /** Text of `ids` with special tokens kept, as the engine decodes them. */
  async decode(ids: readonly number[], affinity: string, signal?: AbortSignal): Promise<string> {
    const { model } = this.policy.transport;
    return this.send(affinity, signal, async (url, options) => {
      const vllm = this.dialect === "vllm";
      const body = (await this.postRoot(
        url,
        "/detokenize",
        vllm ? { model, tokens: ids } : { tokens: ids },
        options,
      )) as { prompt?: unknown; content?: unknown };
      const text = vllm ? body.prompt : body.content;
      if (typeof text !== "string") throw new UnusableAnswer("/detokenize answered without text");
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
    const text = await this.renderedText(closed, affinity, signal);
    if (this.dialect === "vllm") return text;
    // As chat inference feeds it: llama.cpp takes the template's BOS off and tokenizes with its own.
    return this.decode(await this.chatIds(text, affinity, signal), affinity, signal);
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
      const body = (await this.postRoot(
        url,
        "/tokenize",
        { model, messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
        options,
      )) as { tokens?: unknown };
      if (!isIdList(body.tokens)) throw new UnusableAnswer("/tokenize answered without token ids");
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
      const body = (await this.postRoot(
        url,
        "/apply-template",
        { messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
        options,
      )) as { prompt?: unknown };
      if (typeof body.prompt !== "string")
        throw new UnusableAnswer("/apply-template answered without a prompt");
      return body.prompt;
    });
  }

  /**
   * Ids of a llama.cpp template render as its chat route tokenizes it: /apply-template takes off
   * the template's BOS when the model adds one itself (Llama 3), and the chat route puts the
   * model's own back, so the ids are tokenized with special tokens added.
   */
  private chatIds(text: string, affinity: string, signal?: AbortSignal): Promise<number[]> {
    return this.tokenize(text, affinity, signal, true);
  }

  /** Ids of plain text, special-token text parsed as special tokens, no BOS added unless `addSpecial`. */
  private async tokenize(
    text: string,
    affinity: string,
    signal?: AbortSignal,
    addSpecial = false,
  ): Promise<number[]> {
    const { model } = this.policy.transport;
    return this.send(affinity, signal, async (url, options) => {
      const body = (await this.postRoot(
        url,
        "/tokenize",
        this.dialect === "vllm"
          ? { model, prompt: text, add_special_tokens: addSpecial }
          : { content: text, add_special: addSpecial, parse_special: true },
        options,
      )) as { tokens?: unknown };
      if (!isIdList(body.tokens)) throw new UnusableAnswer("/tokenize answered without token ids");
      return body.tokens;
    });
  }

  /** POSTs to a route at the replica's server root; a 404/405 names the route and what to do. */
  private postRoot(url: string, route: string, body: unknown, options: Options): Promise<unknown> {
    const target = `${serverRoot(url)}${route}`;
    return requestJson("POST", target, body, options).catch((error: unknown) => {
      throw missingRoute(error, target, ROOT_ROUTES_FIX);
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
    stream: boolean,
  ): Promise<Answer> {
    if (stream) return this.vllmStream(url, options, body);
    const answer = (await requestJson("POST", `${url}/completions`, body, options)) as {
      choices?: VllmChoice[];
    };
    const choice = answer.choices?.[0];
    if (!choice) throw new UnusableAnswer("the response has no choices");
    if (!isIdList(choice.token_ids)) {
      throw new EngineError(
        "the engine returned no token_ids: token mode needs vLLM >= 0.10.2 (return_token_ids)",
        422,
      );
    }
    const logprobs = choice.logprobs?.token_logprobs;
    if (!Array.isArray(logprobs) || logprobs.length !== choice.token_ids.length) {
      throw new UnusableAnswer(
        `the engine returned ${Array.isArray(logprobs) ? logprobs.length : "no"} logprobs for ${choice.token_ids.length} tokens`,
      );
    }
    return {
      ids: choice.token_ids,
      logprobs: logprobs.map((v) => (typeof v === "number" ? v : Number.NaN)),
      text: typeof choice.text === "string" ? choice.text : "",
      finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : "unknown",
      // vLLM names the matched stop string here (a stop token's id is a number).
      stoppedOnString: typeof choice.stop_reason === "string",
      promptIds: isIdList(choice.prompt_token_ids) ? choice.prompt_token_ids : null,
      cachedTokens: null,
      interrupted: false,
    };
  }

  /**
   * vLLM's completions stream: each chunk carries its token ids and their logprobs, so what an
   * interruption leaves is a whole, aligned prefix of the answer.
   */
  private async vllmStream(url: string, options: Options, body: Record<string, unknown>): Promise<Answer> {
    const answer: Answer = {
      ids: [],
      logprobs: [],
      text: "",
      finishReason: "unknown",
      stoppedOnString: false,
      promptIds: null,
      cachedTokens: null,
      interrupted: false,
    };
    const read = (event: unknown): void => {
      const choice = (event as { choices?: VllmChoice[] })?.choices?.[0];
      if (!choice) return;
      const ids = choice.token_ids ?? [];
      const logprobs = choice.logprobs?.token_logprobs ?? [];
      if (!isIdList(ids) || !Array.isArray(logprobs) || logprobs.length !== ids.length)
        throw new UnusableAnswer("a streamed chunk's token_ids and logprobs do not match");
      answer.ids.push(...ids);
      for (const v of logprobs) answer.logprobs.push(typeof v === "number" ? v : Number.NaN);
      if (typeof choice.text === "string") answer.text += choice.text;
      if (isIdList(choice.prompt_token_ids)) answer.promptIds = choice.prompt_token_ids;
      if (typeof choice.finish_reason === "string") {
        answer.finishReason = choice.finish_reason;
        answer.stoppedOnString = typeof choice.stop_reason === "string";
      }
    };
    try {
      await requestEvents(`${url}/completions`, { ...body, stream: true }, options, read);
    } catch (error) {
      if (!(error instanceof UpdateInterrupted)) throw error;
      answer.interrupted = true;
    }
    return answer;
  }

  private async llamaSample(
    url: string,
    options: Options,
    body: Record<string, unknown>,
    stream: boolean,
  ): Promise<Answer> {
    if (stream) {
      const streamed = await this.llamaStream(url, options, body);
      if (streamed !== null) return streamed;
      this.streamGaps++;
    }
    const answer = (await this.postRoot(url, "/completion", body, options)) as LlamaAnswer;
    const tokens = answer.tokens;
    if (!isIdList(tokens)) throw new UnusableAnswer("llama.cpp returned no tokens (return_tokens)");
    const cached = answer.timings?.cache_n;
    return {
      ids: tokens,
      logprobs: alignLlamaLogprobs(
        tokens,
        answer.completion_probabilities,
        body.post_sampling_probs === true,
      ),
      text: typeof answer.content === "string" ? answer.content : "",
      finishReason: llamaFinishReason(answer.stop_type),
      stoppedOnString: answer.stop_type === "word",
      promptIds: null,
      cachedTokens: typeof cached === "number" ? cached : null,
      interrupted: false,
    };
  }

  /**
   * llama.cpp's /completion stream, one chunk per token (closing the connection is its only
   * cancel, and a closed request answers nothing). A token whose text ends inside a UTF-8
   * character is never streamed (the next chunk's tokens_predicted counts it): an interrupted
   * answer keeps the ids before the first such gap; a finished one with a gap is asked again
   * without streaming (null).
   */
  private async llamaStream(
    url: string,
    options: Options,
    body: Record<string, unknown>,
  ): Promise<Answer | null> {
    const ids: number[] = [];
    const entries: unknown[] = [];
    let text = "";
    let gapAt: number | null = null;
    let last: LlamaAnswer | null = null;
    const read = (event: unknown): void => {
      const chunk = event as LlamaAnswer & { tokens_predicted?: unknown; stop?: unknown };
      const tokens = chunk.tokens ?? [];
      if (!isIdList(tokens)) throw new UnusableAnswer("a streamed chunk's tokens are not ids");
      if (
        gapAt === null &&
        typeof chunk.tokens_predicted === "number" &&
        chunk.tokens_predicted > ids.length + tokens.length
      )
        gapAt = ids.length;
      ids.push(...tokens);
      if (Array.isArray(chunk.completion_probabilities)) entries.push(...chunk.completion_probabilities);
      if (typeof chunk.content === "string") text += chunk.content;
      if (chunk.stop === true) last = chunk;
    };
    let interrupted = false;
    try {
      const route = `${serverRoot(url)}/completion`;
      await requestEvents(route, { ...body, stream: true }, options, read).catch((error: unknown) => {
        throw missingRoute(error, route, ROOT_ROUTES_FIX);
      });
    } catch (error) {
      if (!(error instanceof UpdateInterrupted)) throw error;
      interrupted = true;
    }
    if (!interrupted && gapAt !== null) return null;
    const kept = gapAt ?? ids.length;
    const final = last as LlamaAnswer | null;
    const cached = final?.timings?.cache_n;
    return {
      ids: ids.slice(0, kept),
      logprobs: alignLlamaLogprobs(ids, entries, true).slice(0, kept),
      text,
      finishReason: interrupted ? "abort" : llamaFinishReason(final?.stop_type),
      stoppedOnString: final?.stop_type === "word",
      promptIds: null,
      cachedTokens: typeof cached === "number" ? cached : null,
      interrupted,
    };
  }
}

/** A request's answer before its versions are stamped. */
type Answer = Omit<Segment, "stamp">;

interface VllmChoice {
  text?: unknown;
  token_ids?: unknown;
  prompt_token_ids?: unknown;
  finish_reason?: unknown;
  stop_reason?: unknown;
  logprobs?: { token_logprobs?: unknown } | null;
}

interface LlamaAnswer {
  content?: unknown;
  tokens?: unknown;
  stop_type?: unknown;
  stopping_word?: unknown;
  completion_probabilities?: unknown;
  timings?: { cache_n?: unknown };
}

function llamaFinishReason(stopType: unknown): string {
  if (stopType === "limit") return "length";
  return stopType === "eos" || stopType === "word" ? "stop" : String(stopType);
}

/**
 * The turn's sample from its segments: ids, logprobs and text joined, each id stamped with
 * its segment's version (the dispatch one where a segment spans a keep-mode pause).
 */
function joinSegments(segments: readonly Segment[]): TokenSample {
  const first = segments[0];
  const last = segments[segments.length - 1];
  const versions: number[] = [];
  for (const segment of segments)
    for (let i = 0; i < segment.ids.length; i++) versions.push(segment.stamp.dispatch);
  return {
    ids: segments.flatMap((s) => s.ids),
    logprobs: segments.flatMap((s) => s.logprobs),
    text: segments.map((s) => s.text).join(""),
    finishReason: last.finishReason,
    stoppedOnString: last.stoppedOnString,
    promptIds: first.promptIds,
    cachedTokens: first.cachedTokens,
    ...(segments.some((s) => s.promptDrift) ? { promptDrift: true } : {}),
    versions,
    turnVersions: { dispatch: first.stamp.dispatch, completion: last.stamp.completion },
    segments: segments.length,
  };
}

/**
 * What the template writes between an assistant turn's content and the next user message: the
 * text after the marked content in `full` (anchor, user, marked assistant, user) less the user
 * block, which is `withUser` (anchor, user) less `alone` (anchor). Null when the renders do not
 * fit that shape.
 */
function closingText(full: string, withUser: string, alone: string): string | null {
  const at = full.lastIndexOf(MARK);
  if (at < 0 || !withUser.startsWith(alone)) return null;
  const block = withUser.slice(alone.length);
  const after = full.slice(at + MARK.length);
  return after.endsWith(block) ? after.slice(0, after.length - block.length) : null;
}

/**
 * The logprob of each sampled id from llama.cpp's `completion_probabilities`, NaN where it
 * reported none. llama.cpp leaves out every token whose text ends inside a UTF-8 character (a
 * CJK character or an emoji split across tokens: it holds the token until the character is
 * whole and never reports it) and, after a stop string, the last few entries; `tokens` keeps
 * every sampled id. So the entries are a subsequence of the ids, placed by id: where repeated
 * ids allow more than one placement, the entry is used only if every placement puts it at the
 * same position, so a logprob is never written at another token's place. With
 * `post_sampling_probs` the entries carry probabilities after the sampling chain (`prob`).
 */
export function alignLlamaLogprobs(
  ids: readonly number[],
  entries: unknown,
  postSampling: boolean,
): number[] {
  const list = Array.isArray(entries)
    ? (entries as { id?: unknown; logprob?: unknown; prob?: unknown }[])
    : [];
  const entryIds = list.map((entry) => entry?.id);
  const first = placeLeftmost(ids, entryIds);
  const last = placeLeftmost([...ids].reverse(), [...entryIds].reverse());
  if (first === null || last === null) {
    throw new UnusableAnswer(
      `llama.cpp's ${list.length} logprobs are not for the ${ids.length} tokens it returned (an id is out of order)`,
    );
  }
  const logprobs = new Array<number>(ids.length).fill(Number.NaN);
  list.forEach((entry, j) => {
    const at = first[j];
    if (at !== ids.length - 1 - last[list.length - 1 - j]) return;
    const value = postSampling
      ? typeof entry.prob === "number"
        ? Math.log(entry.prob)
        : Number.NaN
      : entry.logprob;
    logprobs[at] = typeof value === "number" ? value : Number.NaN;
  });
  return logprobs;
}

/** Positions of `wanted` as a subsequence of `ids`, each as early as possible; null when it is not one. */
function placeLeftmost(ids: readonly number[], wanted: readonly unknown[]): number[] | null {
  const at: number[] = [];
  let i = 0;
  for (const id of wanted) {
    while (i < ids.length && ids[i] !== id) i++;
    if (i === ids.length) return null;
    at.push(i++);
  }
  return at;
}
