// Evidence from llama.cpp's side for bench/tokens.ts: every /completion request and answer is
// captured at the HTTP boundary (a wrapper around fetch, below the token engine's parsing), then
// each turn of each token log is matched to the engine's answer for exactly that prompt and
// checked against what the engine reported: the ids it sampled and their logprobs, the prompt
// length it evaluated, the prefix-cache reuse (timings.cache_n) and the slot that served it.
// `/detokenize` on the log's sampled ids must give the text the engine returned.
import type { EpisodeRecord } from "../src/record/episode-record.ts";

/** One /completion exchange as llama.cpp saw and answered it. */
export interface CompletionCapture {
  prompt: number[];
  answer: LlamaAnswer;
}

/** The fields of llama.cpp's /completion answer the checks read. */
export interface LlamaAnswer {
  content?: string;
  tokens?: number[];
  id_slot?: number;
  stop_type?: string;
  tokens_evaluated?: number;
  tokens_cached?: number;
  completion_probabilities?: { id?: number; logprob?: number }[];
  timings?: { cache_n?: number; prompt_n?: number; predicted_n?: number };
}

/** Captures llama.cpp's /completion exchanges and counts every request by route. */
export class EngineCapture {
  private readonly root: string;
  private byPrompt = new Map<string, CompletionCapture[]>();
  /** Requests per route (path), over the whole run. */
  readonly routes = new Map<string, number>();
  private readonly realFetch: typeof fetch;
  /** Count requests by route only while true (the bench's own checks are not rollgym's traffic). */
  counting = true;

  constructor(root: string) {
    this.root = root.replace(/\/+$/, "");
    this.realFetch = globalThis.fetch;
    globalThis.fetch = (input, init) => this.fetch(input, init);
  }

  uninstall(): void {
    globalThis.fetch = this.realFetch;
  }

  /** Drop the captures (after each batch has been checked). */
  clear(): void {
    this.byPrompt = new Map();
  }

  /** The answers to requests whose prompt was exactly `prompt`. */
  answersFor(prompt: readonly number[]): CompletionCapture[] {
    return this.byPrompt.get(prompt.join(",")) ?? [];
  }

  private async fetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const response = await this.realFetch(input, init);
    if (!url.startsWith(this.root)) return response;
    const path = new URL(url).pathname;
    if (this.counting) this.routes.set(path, (this.routes.get(path) ?? 0) + 1);
    if (path === "/completion" && response.ok && typeof init?.body === "string") {
      const body = JSON.parse(init.body) as { prompt?: unknown };
      const answer = (await response.clone().json()) as LlamaAnswer;
      if (Array.isArray(body.prompt)) {
        const prompt = body.prompt as number[];
        const key = prompt.join(",");
        const list = this.byPrompt.get(key) ?? [];
        list.push({ prompt, answer });
        this.byPrompt.set(key, list);
      }
    }
    return response;
  }
}

/** A named check: how many times it ran, how many failed, the first few failures. */
export interface Check {
  checked: number;
  failed: number;
  examples: string[];
}

const CHECKS = {
  log_invariants: "mask, logprobs, rewards and turn boundaries consistent (as test/llm/token-mode.test.ts)",
  engine_answer_for_prompt:
    "llama.cpp answered a /completion whose prompt ids were exactly the log up to the turn",
  sampled_ids: "the ids llama.cpp returned (`tokens`) equal the log's ids of the turn",
  logprobs: "completion_probabilities: one per sampled id, for that id, equal to the log's logprobs",
  engine_prompt_length: "tokens_evaluated = cache_n + prompt_n = turn_starts[k]",
  record_usage: "the turn record's prompt/completion/cached tokens are the engine's",
  cache_covers_previous:
    "turn k > 0: cache_n >= turn_ends[k-1] - 1 (all but the never-evaluated last sampled id)",
  one_slot: "every turn of the episode served by the same llama.cpp slot (id_slot)",
  stop_token: "finish_reason stop: the last sampled id is one of llama.cpp's end-of-generation ids",
  detokenize:
    "/detokenize(sampled ids, less the end token when stopped) = the engine's text = raw_response less '<think>'",
} as const;
export type CheckName = keyof typeof CHECKS;
export const CHECK_MEANINGS: Record<CheckName, string> = CHECKS;

/**
 * llama.cpp's end-of-generation ids for the Qwen3 vocabulary, as `llama-server -v` lists them at
 * start-up ("printing all EOG tokens"): <|endoftext|>, <|im_end|>, the FIM tokens <|fim_pad|>,
 * <|repo_name|>, <|file_sep|>, and "</s>" (128247, a plain BPE token in Qwen's tokenizer.json
 * that llama.cpp turns into a control token by its text). Once the grammar is complete any of
 * them may end a turn; only <|im_end|> is the chat template's end of turn.
 */
export const LLAMA_EOG_IDS: ReadonlySet<number> = new Set([128247, 151643, 151645, 151662, 151663, 151664]);
export const IM_END_ID = 151645;
const MAX_EXAMPLES = 5;

function sameIds(a: readonly number[] | undefined, b: readonly number[]): boolean {
  if (!a || a.length !== b.length) return false;
  for (let i = 0; i < b.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class Evidence {
  readonly checks = Object.fromEntries(
    Object.keys(CHECKS).map((k) => [k, { checked: 0, failed: 0, examples: [] as string[] }]),
  ) as Record<CheckName, Check>;
  episodes = 0;
  failedEpisodes = 0;
  failures: string[] = [];
  turns = 0;
  multiTurnEpisodes = 0;
  sampledIds = 0;
  logIds = 0;
  maxLogLength = 0;
  readonly turnsPerEpisode = new Map<number, number>();
  readonly endReasons = new Map<string, number>();
  readonly finishReasons = new Map<string, number>();
  /** The id each stopped turn ended with. */
  readonly endIds = new Map<number, number>();
  /** cache_n − (turn_ends[k−1] − 1) over turns k > 0: 0 = exactly the previous sequence less its last id. */
  readonly cacheExcess = new Map<number, number>();
  /** cache_n at the first turn (reuse of an earlier episode's prefix on the same slot), summed. */
  firstTurnCached = 0;
  firstTurnPrompt = 0;
  readonly slotUse = new Map<number, number>();
  /** Episodes whose decoded log differs from the template's rendering, and where (char offset). */
  templateDriftEpisodes = 0;
  /** Episodes whose drift check could not run (template_checked false): drift unknown. */
  templateUnchecked = 0;
  templateDriftMultiTurn = 0;
  readonly templateDriftOffsets: number[] = [];
  /** Of those, drift located at the log's final id, a sampled <|im_end|> (see add()). */
  templateDriftAtFinalImEnd = 0;
  /** Episodes whose log ends with a sampled <|im_end|>. */
  endingWithImEnd = 0;
  templateDriftExample: { ids: number[]; offset: number } | null = null;
  templateDriftExampleFinal: { ids: number[]; offset: number } | null = null;
  promptDrift = 0;
  detokenized = 0;

  private check(name: CheckName, ok: boolean, what: () => string): boolean {
    const c = this.checks[name];
    c.checked++;
    if (!ok) {
      c.failed++;
      if (c.examples.length < MAX_EXAMPLES) c.examples.push(what());
    }
    return ok;
  }

  /**
   * Checks one batch's episodes against the captured engine answers. `detokenize` is llama.cpp's
   * /detokenize; `decodeEvery` picks which episodes' turns are sent to it (1: all).
   */
  async add(
    episodes: readonly EpisodeRecord[],
    capture: EngineCapture,
    detokenize: (ids: number[]) => Promise<string>,
    decodeEvery: number,
    prefill: string,
  ): Promise<void> {
    for (const e of episodes) {
      this.episodes++;
      const where = `episode seed ${e.seed} env ${e.env_id}`;
      if (e.failure !== null) {
        this.failedEpisodes++;
        if (this.failures.length < MAX_EXAMPLES) this.failures.push(`${where}: ${e.failure}`);
      }
      this.endReasons.set(e.end_reason, (this.endReasons.get(e.end_reason) ?? 0) + 1);
      this.turnsPerEpisode.set(e.turns.length, (this.turnsPerEpisode.get(e.turns.length) ?? 0) + 1);
      const t = e.tokens;
      if (!t) {
        this.check("log_invariants", false, () => `${where}: no token log`);
        continue;
      }
      this.check("log_invariants", logProblem(e) === null, () => `${where}: ${logProblem(e)}`);
      this.turns += e.turns.length;
      if (e.turns.length > 1) this.multiTurnEpisodes++;
      this.logIds += t.ids.length;
      this.maxLogLength = Math.max(this.maxLogLength, t.ids.length);
      this.promptDrift += t.prompt_drift;
      if (t.template_checked === false) this.templateUnchecked++;
      if (t.template_drift !== null) {
        this.templateDriftEpisodes++;
        if (e.turns.length > 1) this.templateDriftMultiTurn++;
        this.templateDriftOffsets.push(t.template_drift);
        // Where is it? At the log's very last id, a sampled <|im_end|>, when the log less that id
        // decodes to exactly the drift offset's length: the rendering left the last message open.
        const lastId = t.ids[t.ids.length - 1];
        const atFinalImEnd =
          lastId === IM_END_ID && (await detokenize(t.ids.slice(0, -1))).length === t.template_drift;
        if (atFinalImEnd) {
          this.templateDriftAtFinalImEnd++;
          this.templateDriftExampleFinal ??= { ids: t.ids, offset: t.template_drift };
        } else {
          this.templateDriftExample ??= { ids: t.ids, offset: t.template_drift };
        }
      }
      if (t.ids[t.ids.length - 1] === IM_END_ID) this.endingWithImEnd++;
      const slots = new Set<number>();
      const decode = this.episodes % decodeEvery === 0;
      for (const [k, turn] of e.turns.entries()) {
        const at = `${where} turn ${k}`;
        const start = t.turn_starts[k];
        const end = t.turn_ends[k];
        const sampled = t.ids.slice(start, end);
        this.sampledIds += sampled.length;
        this.finishReasons.set(turn.finish_reason, (this.finishReasons.get(turn.finish_reason) ?? 0) + 1);
        const prompt = t.ids.slice(0, start);
        const answers = capture.answersFor(prompt);
        if (
          !this.check("engine_answer_for_prompt", answers.length > 0, () => `${at}: no answer for its prompt`)
        )
          continue;
        const match = answers.find((c) => sameIds(c.answer.tokens, sampled));
        if (
          !this.check(
            "sampled_ids",
            match !== undefined,
            () =>
              `${at}: log ${JSON.stringify(sampled)} vs engine ${answers.map((c) => JSON.stringify(c.answer.tokens)).join(" / ")}`,
          ) ||
          !match
        )
          continue;
        const a = match.answer;
        const probs = a.completion_probabilities ?? [];
        this.check(
          "logprobs",
          probs.length === sampled.length &&
            probs.every((p, i) => p.id === sampled[i] && p.logprob === t.logprobs[start + i]),
          () => `${at}: ${probs.length} probabilities for ${sampled.length} ids, or another id/logprob`,
        );
        const cacheN = a.timings?.cache_n;
        const promptN = a.timings?.prompt_n;
        this.check(
          "engine_prompt_length",
          a.tokens_evaluated === start &&
            cacheN !== undefined &&
            promptN !== undefined &&
            cacheN + promptN === start,
          () =>
            `${at}: turn_starts ${start}, tokens_evaluated ${a.tokens_evaluated}, cache_n ${cacheN} + prompt_n ${promptN}`,
        );
        this.check(
          "record_usage",
          turn.prompt_tokens === start &&
            turn.completion_tokens === sampled.length &&
            turn.cached_tokens === cacheN,
          () =>
            `${at}: record ${turn.prompt_tokens}/${turn.completion_tokens}/${turn.cached_tokens}, engine ${start}/${sampled.length}/${cacheN}`,
        );
        if (k === 0) {
          this.firstTurnCached += cacheN ?? 0;
          this.firstTurnPrompt += start;
        } else {
          const previous = t.turn_ends[k - 1];
          const excess = (cacheN ?? -1) - (previous - 1);
          this.cacheExcess.set(excess, (this.cacheExcess.get(excess) ?? 0) + 1);
          this.check(
            "cache_covers_previous",
            excess >= 0,
            () =>
              `${at}: cache_n ${cacheN} < previous turn_end ${previous} - 1 (slot ${a.id_slot}, earlier slots ${[...slots].join(",")})`,
          );
        }
        if (a.id_slot !== undefined) {
          slots.add(a.id_slot);
          this.slotUse.set(a.id_slot, (this.slotUse.get(a.id_slot) ?? 0) + 1);
        }
        const stopped = turn.finish_reason === "stop";
        if (stopped)
          this.endIds.set(
            sampled[sampled.length - 1],
            (this.endIds.get(sampled[sampled.length - 1]) ?? 0) + 1,
          );
        if (stopped)
          this.check(
            "stop_token",
            LLAMA_EOG_IDS.has(sampled[sampled.length - 1]),
            () => `${at}: ends ${sampled.at(-1)}`,
          );
        if (decode) {
          this.detokenized++;
          const text = await detokenize(stopped ? sampled.slice(0, -1) : sampled);
          this.check(
            "detokenize",
            text === a.content && `${prefill}${text}` === turn.raw_response,
            () =>
              `${at}: /detokenize ${JSON.stringify(text)}, engine content ${JSON.stringify(a.content)}, raw ${JSON.stringify(turn.raw_response)}`,
          );
        }
      }
      this.check("one_slot", slots.size === 1, () => `${where}: slots ${[...slots].join(",")}`);
    }
  }

  /** Failed checks, in total. */
  get failedChecks(): number {
    return Object.values(this.checks).reduce((n, c) => n + c.failed, 0);
  }
}

/** The log's own invariants (the same as test/llm/token-mode.test.ts's checkLog), or null. */
export function logProblem(e: EpisodeRecord): string | null {
  const t = e.tokens!;
  const n = t.ids.length;
  if (t.loss_mask.length !== n || t.logprobs.length !== n || t.rewards.length !== n)
    return "array lengths differ";
  if (t.turn_starts.length !== e.turns.length || t.turn_ends.length !== e.turns.length)
    return "turn boundaries do not match the turns";
  if (e.turns.length > 0 && t.turn_starts[0] !== t.prompt_length)
    return "turn 0 does not start at prompt_length";
  const inTurn = new Uint8Array(n);
  for (let k = 0; k < e.turns.length; k++) {
    const start = t.turn_starts[k];
    const end = t.turn_ends[k];
    if (end <= start) return `turn ${k} is empty`;
    if (k > 0 && start <= t.turn_ends[k - 1]) return `no inserted block before turn ${k}`;
    if (e.turns[k].completion_tokens !== end - start) return `turn ${k}: completion_tokens ≠ ${end - start}`;
    if (Math.abs(t.rewards[end - 1] - e.turns[k].reward) > 1e-5)
      return `turn ${k}: reward not on its last id`;
    inTurn.fill(1, start, end);
  }
  for (let i = 0; i < n; i++) {
    if (t.loss_mask[i] !== inTurn[i]) return `loss_mask[${i}] = ${t.loss_mask[i]}`;
    if (!inTurn[i] && t.logprobs[i] !== 0) return `logprob outside a turn at ${i}`;
    if (inTurn[i] && !(t.logprobs[i] <= 0)) return `logprob ${t.logprobs[i]} at ${i}`;
    if (!inTurn[i] && t.rewards[i] !== 0) return `reward outside a turn's end at ${i}`;
  }
  return null;
}
