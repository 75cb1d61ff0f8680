// Token in, token out: prompts go to the engine as token ids and come back as the exact ids it
// sampled, with their logprobs, so an episode's token log is what the model saw and produced
// and a trainer never re-tokenizes text. vLLM: /v1/completions with a token-id prompt and
// return_token_ids; llama.cpp: /completion with return_tokens. The ids inserted between turns
// (closing the assistant turn, the next user message, the generation prompt and prefill) are a
// chat-template delta rendered by the engine itself, so they follow the model's own template:
// the whole conversation rendered, or, once a replica's renders verified that the template
// writes the same block after any assistant turn, one /tokenize of that block (id space).
import type { ChatMessage, SamplingParams } from "./chat.ts";
import { onParentAbort, type PauseClock } from "./deadline.ts";
import { type Dialect, missingRoute, serverRoot } from "./engine.ts";
import { type EngineUpdates, type Sent, UpdateInterrupted } from "./engine-updates.ts";
import { checkFinishReason, samplingFields } from "./generation.ts";
import {
  type EngineConnections,
  EngineError,
  JsonText,
  type RequestOptions,
  requestEvents,
  requestJson,
  UnusableAnswer,
  utf8Length,
} from "./http.ts";
import { parseEchoing } from "./prompt-echo.ts";
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
/** A probe's user content, to find where the template writes it in the block after an assistant turn. */
const USER_MARK = "\u2063rollgym-user\u2063";
/** Whitespace around a probe's user content: the block passes contents verbatim when it keeps it, trims them when it drops it. */
const PAD = " \n";
/** Distinct first prompts whose renders are kept for the episodes that start from them. */
const FIRST_PROMPTS_KEPT = 256;
/** Id-space blocks whose ids are kept per replica (about 1 KiB each with a Sokoban observation). */
const BLOCKS_KEPT = 1024;
/** Drift checks in a row, on episodes of two turns or more, that verify a template append-only. */
const APPEND_ONLY_CHECKS = 4;
/** Whitespace by JavaScript's measure or Python's (Jinja's trim): the latter adds U+001C…U+001F and U+0085. */
function isSpace(c: string | undefined): boolean {
  if (c === undefined) return false;
  const code = c.charCodeAt(0);
  return /\s/.test(c) || (code >= 0x1c && code <= 0x1f) || code === 0x85;
}

/** Where one episode's continuations came from (docs/rollouts.md, "Token mode"). */
export interface ContinuationTally {
  /** One /tokenize of the block after the assistant turn. */
  idSpace: number;
  /** The whole conversation rendered (verification, spot checks, fallback). */
  rendered: number;
  /** Why the id-space path was not taken, when it was for a reason other than verification. */
  fallback: string | null;
  /** Turns whose own end token (not the template's) stands in the log where the template closes the turn. */
  substituted: number;
}

/** The text a template writes after an assistant turn's content, around the next user content. */
type BlockShape =
  | { before: string; after: string; edges: "verbatim" | "trimmed" | "unknown" }
  | { refused: string };

/** A full render of a continuation checked against the block; `done` once its verdict is in. */
interface Verify {
  epoch: number;
  spot: boolean;
  done: () => void;
}

/**
 * A continuation's way on one replica: in id space, verified by a full render, after a
 * verification under way, or a full render that verifies nothing (null: the fallback).
 */
type Plan = "id-space" | Verify | { wait: Promise<void> } | null;

/** One replica's verification of the block, in one of its epochs. */
interface BlockCheck {
  epoch: number;
  /** Conversation lengths (in messages) a full render agreed on. */
  verified: Set<number>;
  /** Verifications under way, by conversation length. */
  pending: Map<number, Promise<void>>;
  /** Id-space continuations since verification, for the spot checks. */
  since: number;
}

/** The block's text for `user`, or why it cannot be used for it. */
function localBlock(shape: BlockShape, user: string): string | { refused: string } {
  if ("refused" in shape) return shape;
  if (shape.edges === "verbatim" || !(isSpace(user[0]) || isSpace(user.at(-1))))
    return shape.before + user + shape.after;
  // Trimmed as Jinja's trim does, where JavaScript and Python agree: ASCII whitespace off,
  // and no whitespace by either measure left at an end.
  const trimmed = user.replace(/^[ \t\n\r\v\f]+|[ \t\n\r\v\f]+$/g, "");
  if (shape.edges === "trimmed" && !isSpace(trimmed[0]) && !isSpace(trimmed.at(-1)))
    return shape.before + trimmed + shape.after;
  return {
    refused: "the chat template changes the whitespace at the ends of this user message in a way not learned",
  };
}

/**
 * The computation kept in `map` under `key`, started by the first caller; the oldest entry goes
 * when more than `keep` are kept, and a failed computation is forgotten so the next caller tries again.
 */
function sharedIn<T>(
  map: Map<string, Promise<T>>,
  key: string,
  compute: () => Promise<T>,
  keep: number,
): Promise<T> {
  const kept = map.get(key);
  if (kept !== undefined) return kept;
  const computed = compute();
  map.set(key, computed);
  if (map.size > keep) map.delete(map.keys().next().value as string);
  computed.then(
    (value) => fulfilled.set(computed, value),
    () => {
      if (map.get(key) === computed) map.delete(key);
    },
  );
  return computed;
}

/** The values of shared computations that have come in, so their callers skip waiting on them. */
const fulfilled = new WeakMap<Promise<unknown>, unknown>();

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
  /** The replica's epoch, bumped each time it comes back after going out (absent: one epoch for good). */
  replicaEpoch?(url: string): number;
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
  /** The latest first prompts' renders, shared by the episodes that start from them (a group's members). */
  private readonly firstPrompts = new Map<string, Promise<readonly number[]>>();
  /** The extra body sent with samples, and the transport's extra body it was worked out from. */
  private extra: Record<string, unknown> = {};
  private extraFor: Record<string, unknown> | null = null;
  /** Requests whose echoed prompt ids differed from the log they were sent from. */
  promptDrift = 0;
  /** Requests whose answer echoed the prompt ids at all (vLLM's prompt_token_ids), for evidence. */
  promptEchoes = 0;
  /** Turns continued from their sampled tokens after a weight update interrupted them. */
  continued = 0;
  /** Streamed llama.cpp answers that left out held tokens, asked again without streaming. */
  streamGaps = 0;
  /**
   * Why every continuation renders the whole conversation on this engine, once a full render
   * disagreed with the block learned from probes (the template rewrites what follows a turn).
   */
  fallback: string | null = null;
  /** Each replica's verification of the block in its current epoch. */
  private readonly checks = new Map<string, BlockCheck>();
  /** Verified continuations also rendered whole: one in this many per replica (Infinity: none). */
  spotEvery = 64;
  /** Spot checks done (a full render of a continuation the id-space path would have taken). */
  spotChecks = 0;
  /**
   * Blocks tokenized lately in id space, per replica epoch: a group's members often see the same
   * observation at the same turn, and a replica tokenizes the same text to the same ids.
   */
  private readonly blocks = new Map<string, { epoch: number; ids: Map<string, Promise<number[]>> }>();
  /** Id-space continuations whose block's ids were kept from an earlier /tokenize of the same text. */
  blockHits = 0;
  /** Full renders that verified the block at a depth on a replica epoch (spot checks aside). */
  verifications = 0;
  /** Drift checks in a row that found the log to be the template's rendering of a multi-turn conversation. */
  private cleanDriftChecks = 0;
  /** A drift check found the log not to be the template's rendering: the check runs on every episode. */
  private drifted = false;
  /** Called after each sample with its seconds (retries and interruptions included) and ids, or null when it failed. */
  onSample: ((seconds: number, ids: number | null) => void) | null = null;

  constructor(policy: TokenEngineHost) {
    this.policy = policy;
    this.dialect = policy.engineDialect;
  }

  private constant<T>(key: string, compute: () => Promise<T>): Promise<T> {
    return sharedIn(this.constants as Map<string, Promise<T>>, key, compute, Number.POSITIVE_INFINITY);
  }

  /** Waits for `value` unless `signal` aborts first (the shared computation goes on). */
  private async orAbort<T>(value: Promise<T>, signal?: AbortSignal): Promise<T> {
    if (!signal) return value;
    signal.throwIfAborted();
    if (fulfilled.has(value)) return fulfilled.get(value) as T;
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

  /**
   * The template is verified append-only: APPEND_ONLY_CHECKS drift checks in a row (since the
   * last replica came back) found each decoded log to be the template's rendering, none ever
   * found drift, and continuations agree with the block. The end-of-episode check is then skipped.
   */
  get appendOnly(): boolean {
    return !this.drifted && this.fallback === null && this.cleanDriftChecks >= APPEND_ONLY_CHECKS;
  }

  /** The outcome of an episode's drift check (its number of turns: one-turn episodes verify nothing). */
  driftChecked(drift: number | null, turns: number): void {
    if (drift !== null) this.drifted = true;
    else if (turns > 1) this.cleanDriftChecks++;
  }

  /** Context length the log plus max_tokens must fit. */
  get limit(): number | null {
    return this.policy.meter?.limit ?? null;
  }

  /**
   * The first prompt: the chat template with its generation prompt, rendered once by the
   * engine, then the prefill's ids (RAGEN appends "<think>" to the rendered text the same way).
   * A group's members start from the same messages, so they share one render: the latest
   * FIRST_PROMPTS_KEPT distinct first prompts are kept, each computed without any caller's
   * signal (one cancelled episode cannot fail its group's others); a failed one is forgotten.
   */
  async firstPrompt(
    messages: readonly ChatMessage[],
    prefill: string,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<readonly number[]> {
    const key = `${prefill}\u0000${JSON.stringify(messages)}`;
    const render = sharedIn(
      this.firstPrompts,
      key,
      () => this.renderFirstPrompt(messages, prefill, affinity),
      FIRST_PROMPTS_KEPT,
    );
    return this.orAbort(render, signal);
  }

  private async renderFirstPrompt(
    messages: readonly ChatMessage[],
    prefill: string,
    affinity: string,
  ): Promise<readonly number[]> {
    const [rendered, tail] = await Promise.all([
      this.dialect === "vllm"
        ? this.templateIds(messages, true, affinity)
        : this.templateText(messages, true, affinity).then((t) => this.chatIds(t, affinity)),
      this.prefillIds(prefill, affinity),
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
   *
   * That text is `before + user content + after` on templates whose block after an assistant
   * turn does not depend on the conversation: once a replica's own full renders agree with that
   * block, the continuation costs one /tokenize of it (the id-space path); until then, and for
   * good once any render disagrees, the whole conversation is rendered. `tally` counts which.
   */
  async continuation(
    conversation: readonly ChatMessage[],
    end: TurnEnd,
    prefill: string,
    affinity: string,
    signal?: AbortSignal,
    tally?: ContinuationTally,
  ): Promise<number[]> {
    const last = conversation.length - 2;
    if (last < 0 || conversation[last].role !== "assistant" || conversation[last + 1].role !== "user") {
      throw new RangeError("a continuation follows an assistant turn and a user message");
    }
    const [shape, closing, tail] = await Promise.all([
      // Without a block (the probes failed), this continuation renders the whole conversation.
      this.blockShape(affinity, signal).catch(
        (error: unknown): BlockShape => ({ refused: `the probe renders failed: ${String(error)}` }),
      ),
      this.closingIds(affinity, signal),
      this.prefillIds(prefill, affinity, signal),
    ]);
    const block = localBlock(shape, conversation[last + 1].content);
    const { after, path } = await this.blockIds(conversation, block, affinity, signal);
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
    if (tally) {
      if (skip === 1 && end.lastId !== closing[0]) tally.substituted++;
      if (path === "id-space") tally.idSpace++;
      else tally.rendered++;
      const why =
        path === "id-space" ? null : (this.fallback ?? (typeof block === "string" ? null : block.refused));
      if (why !== null) tally.fallback = why;
    }
    return [...after.slice(skip), ...tail];
  }

  /**
   * The ids of the text after the last assistant turn's content, on one replica: in id space
   * when that replica has verified the block at this depth, else from a full render (checked
   * against the block while verifying). A continuation that finds the same verification under
   * way waits for it outside the replica's lease, then goes again.
   */
  private async blockIds(
    conversation: readonly ChatMessage[],
    block: string | { refused: string },
    affinity: string,
    signal?: AbortSignal,
  ): Promise<{ after: number[]; path: "id-space" | "rendered" }> {
    const depth = conversation.length;
    for (;;) {
      const answer = await this.send(affinity, signal, async (url, options) => {
        const plan = typeof block === "string" ? this.planOn(url, depth) : null;
        if (plan === "id-space")
          return { after: await this.blockTokens(url, options, block as string), path: plan };
        if (plan !== null && "wait" in plan) return plan;
        try {
          const text = await this.renderedTail(url, options, conversation, conversation.length - 2);
          if (plan !== null) this.judge(plan, url, depth, text === block);
          return { after: await this.tokenizeAt(url, options, text), path: "rendered" as const };
        } finally {
          plan?.done();
        }
      });
      if (!("wait" in answer)) return answer;
      await this.orAbort(answer.wait, signal);
    }
  }

  /**
   * The ids of an id-space block on `url`: from a /tokenize of the same text in this replica
   * epoch, finished or still under way (a group's members reach the same observation at about
   * the same time), or asked. An ask that failed is not shared: each waiter then asks for itself.
   */
  private async blockTokens(url: string, options: Options, block: string): Promise<number[]> {
    // Per replica, by the block's text itself: no key is built (and hashed) from a copy of it.
    const epoch = this.policy.replicaEpoch?.(url) ?? 0;
    let kept = this.blocks.get(url);
    if (kept === undefined || kept.epoch !== epoch) {
      kept = { epoch, ids: new Map() };
      this.blocks.set(url, kept);
    }
    const { ids } = kept;
    const earlier = ids.get(block);
    if (earlier !== undefined) {
      const found = await earlier.catch(() => null);
      if (found !== null) {
        this.blockHits++;
        return found;
      }
      return this.tokenizeAt(url, options, block);
    }
    const asked = this.tokenizeAt(url, options, block);
    ids.set(block, asked);
    if (ids.size > BLOCKS_KEPT) ids.delete(ids.keys().next().value as string);
    asked.catch(() => {
      if (ids.get(block) === asked) ids.delete(block);
    });
    return asked;
  }

  /** The text the template writes after the marked assistant content of the real conversation, rendered on `url`. */
  private async renderedTail(
    url: string,
    options: Options,
    conversation: readonly ChatMessage[],
    last: number,
  ): Promise<string> {
    const marked = conversation.map((m, i) => (i === last ? { ...m, content: MARK } : m));
    const text = await this.promptTextAt(url, options, marked);
    const at = text.lastIndexOf(MARK);
    if (at < 0) throw new EngineError("the chat template does not show the assistant turn's content", 422);
    return text.slice(at + MARK.length);
  }

  /**
   * How a continuation of `depth` messages goes on replica `url`: the first at each depth in
   * this replica epoch is verified by a full render (templates may add text from some turn on),
   * later ones at that depth wait for its verdict, then go in id space, with a spot check every
   * `spotEvery`-th. A replica that came back (new epoch) is verified again.
   */
  private planOn(url: string, depth: number): Plan {
    if (this.fallback !== null) return null;
    const epoch = this.policy.replicaEpoch?.(url) ?? 0;
    let check = this.checks.get(url);
    if (check?.epoch !== epoch) {
      // A restarted engine may serve another template: the drift check runs again too.
      if (check !== undefined) this.cleanDriftChecks = 0;
      check = { epoch, verified: new Set(), pending: new Map(), since: 0 };
      this.checks.set(url, check);
    }
    if (!check.verified.has(depth)) {
      const under = check.pending.get(depth);
      if (under) return { wait: under };
      const { pending } = check;
      let done = () => {};
      pending.set(depth, new Promise<void>((resolve) => (done = resolve)));
      return {
        epoch,
        spot: false,
        done: () => {
          pending.delete(depth);
          done();
        },
      };
    }
    if (++check.since % this.spotEvery === 0) return { epoch, spot: true, done: () => {} };
    return "id-space";
  }

  /** Records a full render's verdict on the block; one disagreement renders every later continuation whole. */
  private judge(plan: Verify, url: string, depth: number, agreed: boolean): void {
    if (plan.spot) this.spotChecks++;
    else this.verifications++;
    if (!agreed) {
      this.fallback ??=
        `the chat template rewrites what follows an assistant turn: a ${depth}-message conversation ` +
        `rendered on ${url} differs from the block learned from probe renders, so every continuation renders the whole conversation`;
      this.cleanDriftChecks = 0;
      return;
    }
    const check = this.checks.get(url);
    if (check?.epoch === plan.epoch) check.verified.add(depth);
  }

  /**
   * The block the template writes after an assistant turn, learned from probe renders: the
   * same with another history and another system prompt, and whether the user content passes
   * verbatim or trimmed (Llama 3 trims it). Its `refused` names why there is no block to use.
   */
  private blockShape(affinity: string, signal?: AbortSignal): Promise<BlockShape> {
    return this.orAbort(
      this.constant("block", () => this.computeShape(affinity)),
      signal,
    );
  }

  private async computeShape(affinity: string): Promise<BlockShape> {
    const probe = async (history: readonly ChatMessage[], user: string): Promise<string | null> => {
      const messages = [...history, { role: "assistant", content: MARK }, { role: "user", content: user }];
      const text = await this.promptText(messages as ChatMessage[], affinity);
      const at = text.lastIndexOf(MARK);
      return at < 0 ? null : text.slice(at + MARK.length);
    };
    const short: ChatMessage[] = [ANCHOR, { role: "user", content: "x" }];
    const long: ChatMessage[] = [
      { role: "system", content: "another system prompt" },
      { role: "user", content: "y" },
      { role: "assistant", content: "z" },
      { role: "user", content: "w" },
    ];
    const padded = `${PAD}${USER_MARK}${PAD}`;
    const [plain, other, spaced] = await Promise.all([
      probe(short, USER_MARK),
      probe(long, USER_MARK),
      probe(short, padded),
    ]);
    const at = plain?.indexOf(USER_MARK) ?? -1;
    if (plain === null || at < 0 || plain.indexOf(USER_MARK, at + 1) >= 0)
      return {
        refused: "the chat template does not write a user message once, as sent, after an assistant turn",
      };
    if (other !== plain)
      return {
        refused:
          "the chat template writes what follows an assistant turn differently with another history or system prompt",
      };
    const before = plain.slice(0, at);
    const after = plain.slice(at + USER_MARK.length);
    const edges = spaced === before + padded + after ? "verbatim" : spaced === plain ? "trimmed" : "unknown";
    return { before, after, edges };
  }

  /**
   * Whether a turn that ended so keeps, in the log, an end token of its own where the template
   * closes the turn with another (Qwen's <|endoftext|> for <|im_end|>): chat inference renders
   * that place differently. Free once the closing is known.
   */
  async standsIn(end: TurnEnd, affinity: string, signal?: AbortSignal): Promise<boolean> {
    if (!end.stoppedOnToken) return false;
    const closing = await this.closingIds(affinity, signal);
    return closing.length > 0 && end.lastId !== closing[0];
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
  private promptText(
    messages: readonly ChatMessage[],
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    return this.send(affinity, signal, (url, options) => this.promptTextAt(url, options, messages));
  }

  /** The same on one replica: both requests (vLLM) go where the render is checked. */
  private async promptTextAt(
    url: string,
    options: Options,
    messages: readonly ChatMessage[],
  ): Promise<string> {
    if (this.dialect === "llamacpp") return this.templateTextAt(url, options, messages, true);
    return this.decodeAt(url, options, await this.templateIdsAt(url, options, messages, true));
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
   * lowered by their number, and the segments are joined (issue #22). `promptJson`, when the
   * caller keeps it, is JSON.stringify(promptIds), sent as is.
   */
  async generate(
    promptIds: readonly number[],
    sampling: SamplingParams,
    affinity: string,
    signal?: AbortSignal,
    promptJson?: string,
  ): Promise<TokenSample> {
    const observe = this.onSample;
    if (observe === null) return this.sample(promptIds, sampling, affinity, signal, promptJson);
    const started = performance.now();
    try {
      const sample = await this.sample(promptIds, sampling, affinity, signal, promptJson);
      observe((performance.now() - started) / 1000, sample.ids.length);
      return sample;
    } catch (error) {
      observe((performance.now() - started) / 1000, null);
      throw error;
    }
  }

  private async sample(
    promptIds: readonly number[],
    sampling: SamplingParams,
    affinity: string,
    signal?: AbortSignal,
    promptJson?: string,
  ): Promise<TokenSample> {
    const segments: Segment[] = [];
    let prompt: readonly number[] = promptIds;
    let json = promptJson;
    for (;;) {
      const left = sampling.max_tokens - (prompt.length - promptIds.length);
      const segment = await this.segment(prompt, { ...sampling, max_tokens: left }, affinity, signal, json);
      segments.push(segment);
      if (!segment.interrupted) break;
      prompt = [...prompt, ...segment.ids];
      json = undefined;
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
    promptJson?: string,
  ): Promise<Segment> {
    const { model, connections, timeoutMs, grammar, clock } = this.policy.transport;
    const extra = this.completionsExtra();
    const updates = this.policy.versions;
    return this.policy.routed(affinity, signal, async (url, _attempt, sent) => {
      const fields = samplingFields(sampling, this.dialect);
      const options: Options = { signal: sent.signal, timeoutMs, headers: sent.headers, connections, clock };
      const stream = await updates.streams(url);
      // vLLM echoes the prompt: where it echoes the very JSON sent, it is not parsed again.
      if (this.dialect === "vllm" && !stream && promptJson !== undefined)
        options.parse = (body) => parseEchoing(body, promptJson, promptIds);
      const sample =
        this.dialect === "vllm"
          ? await this.vllmSample(
              url,
              options,
              withPrompt({ model }, promptIds, stream ? undefined : promptJson, {
                ...fields,
                logprobs: 0,
                return_token_ids: true,
                ...(grammar ? { structured_outputs: { grammar } } : {}),
                ...extra,
                ...sent.body,
              }),
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
        const same =
          sample.promptIds === promptIds ||
          (sample.promptIds.length === promptIds.length && startsWith(sample.promptIds, promptIds));
        if (!same) {
          this.promptDrift++;
          sample.promptDrift = true;
        }
      }
      const answered = interrupted ? undefined : { epoch: sent.epoch, url };
      return { ...sample, interrupted, stamp: updates.stamp(sent.version, answered) };
    });
  }

  /** The extra body but what only the chat route reads, worked out once per extra body. */
  private completionsExtra(): Record<string, unknown> {
    const { extraBody } = this.policy.transport;
    if (this.extraFor !== extraBody) {
      this.extraFor = extraBody;
      this.extra = Object.fromEntries(
        Object.entries(extraBody).filter(([key]) => !CHAT_ONLY_FIELDS.has(key)),
      );
    }
    return this.extra;
  }

  /** Text of `ids` with special tokens kept, as the engine decodes them. */
  decode(ids: readonly number[], affinity: string, signal?: AbortSignal): Promise<string> {
    return this.send(affinity, signal, (url, options) => this.decodeAt(url, options, ids));
  }

  private async decodeAt(url: string, options: Options, ids: readonly number[]): Promise<string> {
    const vllm = this.dialect === "vllm";
    const body = (await this.postRoot(
      url,
      "/detokenize",
      vllm ? { model: this.policy.transport.model, tokens: ids } : { tokens: ids },
      options,
    )) as { prompt?: unknown; content?: unknown };
    const text = vllm ? body.prompt : body.content;
    if (typeof text !== "string") throw new UnusableAnswer("/detokenize answered without text");
    return text;
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
  private templateIds(
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<number[]> {
    return this.send(affinity, signal, (url, options) =>
      this.templateIdsAt(url, options, messages, generationPrompt),
    );
  }

  private async templateIdsAt(
    url: string,
    options: Options,
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
  ): Promise<number[]> {
    const { model } = this.policy.transport;
    const body = (await this.postRoot(
      url,
      "/tokenize",
      { model, messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
      options,
    )) as { tokens?: unknown };
    if (!isIdList(body.tokens)) throw new UnusableAnswer("/tokenize answered without token ids");
    return body.tokens;
  }

  /** Text of the chat template applied to `messages` (llama.cpp's /apply-template). */
  private templateText(
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
    affinity: string,
    signal?: AbortSignal,
  ): Promise<string> {
    return this.send(affinity, signal, (url, options) =>
      this.templateTextAt(url, options, messages, generationPrompt),
    );
  }

  private async templateTextAt(
    url: string,
    options: Options,
    messages: readonly ChatMessage[],
    generationPrompt: boolean,
  ): Promise<string> {
    const body = (await this.postRoot(
      url,
      "/apply-template",
      { messages, add_generation_prompt: generationPrompt, ...this.kwargs() },
      options,
    )) as { prompt?: unknown };
    if (typeof body.prompt !== "string")
      throw new UnusableAnswer("/apply-template answered without a prompt");
    return body.prompt;
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
  private tokenize(
    text: string,
    affinity: string,
    signal?: AbortSignal,
    addSpecial = false,
  ): Promise<number[]> {
    return this.send(affinity, signal, (url, options) => this.tokenizeAt(url, options, text, addSpecial));
  }

  private async tokenizeAt(
    url: string,
    options: Options,
    text: string,
    addSpecial = false,
  ): Promise<number[]> {
    const body = (await this.postRoot(
      url,
      "/tokenize",
      this.dialect === "vllm"
        ? { model: this.policy.transport.model, prompt: text, add_special_tokens: addSpecial }
        : { content: text, add_special: addSpecial, parse_special: true },
      options,
    )) as { tokens?: unknown };
    if (!isIdList(body.tokens)) throw new UnusableAnswer("/tokenize answered without token ids");
    return body.tokens;
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
    body: Record<string, unknown> | JsonText,
    stream: boolean,
  ): Promise<Answer> {
    if (stream) return this.vllmStream(url, options, body as Record<string, unknown>);
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
 * The body `{...lead, prompt: promptIds, ...rest}`: as JSON text when the caller keeps the
 * prompt's (`promptJson`, JSON.stringify(promptIds)), the same text JSON.stringify writes for
 * the object, without serialising every id again; the object itself when there is no such text
 * or `rest` names the prompt or a lead key (the spread would replace it in place) or an
 * integer-like one.
 */
export function withPrompt(
  lead: Record<string, unknown>,
  promptIds: readonly number[],
  promptJson: string | undefined,
  rest: Record<string, unknown>,
): Record<string, unknown> | JsonText {
  let whole = false;
  for (const key in rest) {
    // Integer-like keys (a digit first): JSON.stringify writes them first.
    const first = key.charCodeAt(0);
    if (key === "prompt" || key in lead || (first >= 48 && first <= 57)) whole = true;
  }
  if (whole || promptJson === undefined) return { ...lead, prompt: promptIds, ...rest };
  const head = JSON.stringify(lead).slice(0, -1);
  const tail = JSON.stringify(rest).slice(1);
  const before = head === "{" ? "" : ",";
  const after = tail === "}" ? "" : ",";
  // The ids' JSON is ASCII: its byte length is its length, so the long part is never counted again.
  const bytes = utf8Length(head) + before.length + 9 + promptJson.length + after.length + utf8Length(tail);
  return new JsonText(`${head}${before}"prompt":${promptJson}${after}${tail}`, bytes);
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
  // One segment, the common case: its arrays as they are.
  const whole = segments.length === 1;
  return {
    ids: whole ? first.ids : segments.flatMap((s) => s.ids),
    logprobs: whole ? first.logprobs : segments.flatMap((s) => s.logprobs),
    text: whole ? first.text : segments.map((s) => s.text).join(""),
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
