// The "engine core": turns a prompt into generated token ids the way vLLM's scheduler and
// detokenizer would report them (EOS appended before stop checks, stop strings matched on
// text, length stops), with synthetic per-token logprobs. Pure: all randomness is passed in.
import { answerPrompt, type PolicyAnswer, type PolicyOptions, padAnswer, padding } from "./answer.ts";
import type { Rng } from "./rng.ts";
import type { MockTokenizer } from "./tokenizer.ts";

export interface GenerateInput {
  tokenizer: MockTokenizer;
  promptText: string;
  promptIds: readonly number[];
  /** Effective limit, already within max_model_len - prompt length. */
  maxTokens: number;
  minTokens: number;
  stop: readonly string[];
  stopTokenIds: readonly number[];
  ignoreEos: boolean;
  skipSpecialTokens: boolean;
  includeStopStr: boolean;
  /** Alternatives per generated token (-1: whole vocabulary); null: no logprobs. */
  logprobs: number | null;
  /** Alternatives per prompt token; null: no prompt logprobs. */
  promptLogprobs: number | null;
  /**
   * The response length the latency model drew (tokens, EOS included): the answer is padded up
   * to it, then cut at maxTokens like any other. null: the policy's own length.
   */
  targetTokens?: number | null;
}

export interface Alternative {
  id: number;
  logprob: number;
}

export interface TokenLogprob {
  id: number;
  logprob: number;
  /** The top alternatives (never the sampled token), most likely first. */
  alternatives: Alternative[];
}

export interface PromptLogprob {
  id: number;
  logprob: number;
  rank: number;
  alternatives: (Alternative & { rank: number })[];
}

export type FinishReason = "stop" | "length" | "abort";

export interface Generation {
  /** Every generated id, including the EOS / stop token that ended it. */
  tokenIds: number[];
  /** The visible text (special tokens skipped, stop string cut). */
  text: string;
  /** The text each token added; their concatenation is `text`. */
  deltas: string[];
  finishReason: FinishReason;
  /** Stop token id or stop string that ended it; null for EOS and length. */
  stopReason: number | string | null;
  answer: PolicyAnswer;
  logprobs: TokenLogprob[] | null;
  /** One entry per prompt token, the first null (nothing precedes it). */
  promptLogprobs: (PromptLogprob | null)[] | null;
}

// Sampled-token probabilities are mostly high, like a confident small model's.
function sampledLogprob(rng: Rng): number {
  const p = 1 - 0.9 * rng.next() ** 3;
  return Math.log(Math.min(p, 0.9999));
}

function alternativesFor(
  tokenizer: MockTokenizer,
  id: number,
  logprob: number,
  count: number,
  rng: Rng,
): Alternative[] {
  const { vocabSize, fillerIds } = tokenizer;
  const n = Math.min(count, vocabSize - 1);
  const rest = 1 - Math.exp(logprob);
  // Taken ids point past themselves (path-compressed), so walking on from a taken id to the
  // next free one stays cheap even for whole-vocabulary requests.
  const taken = new Map<number, number>();
  const take = (x: number): void => {
    taken.set(x, (x + 1) % vocabSize);
  };
  const free = (x: number): number => {
    let y = x;
    while (taken.has(y)) y = taken.get(y)!;
    for (let z = x; z !== y; ) {
      const after = taken.get(z)!;
      taken.set(z, y);
      z = after;
    }
    return y;
  };
  take(id);
  const out: Alternative[] = [];
  for (let j = 0; j < n; j++) {
    const alt = free(fillerIds[rng.int(fillerIds.length)]);
    take(alt);
    // Halve the leftover mass each step: the probabilities never sum above 1.
    out.push({ id: alt, logprob: Math.max(Math.log(rest * 0.5 ** (j + 1)), -9999) });
  }
  return out;
}

/** Ids the model "wants" to write: the answer, filler if EOS is suppressed, then EOS. */
function* intendedIds(answerIds: readonly number[], input: GenerateInput, rng: Rng): Generator<number> {
  const { fillerIds, eosId } = input.tokenizer;
  yield* answerIds;
  // min_tokens holds EOS back (the model keeps talking); ignore_eos never lets it out.
  for (let n = answerIds.length; input.ignoreEos || n + 1 < input.minTokens; n++) {
    yield fillerIds[rng.int(fillerIds.length)];
  }
  yield eosId;
}

/**
 * The answer padded (see PolicyAnswer.padAt) so that its tokens and the EOS make `target`;
 * an answer already that long stays as it is.
 */
export function fitAnswerLength(
  answer: PolicyAnswer,
  tokenizer: MockTokenizer,
  target: number,
): PolicyAnswer {
  const count = (a: PolicyAnswer): number => tokenizer.encode(a.text).length + 1;
  const base = count(answer);
  if (base >= target) return answer;
  // A pad word is one token in both tokenizers; the real count corrects any merge at the seams.
  let words = target - base;
  let padded = padAnswer(answer, padding(words));
  for (let tries = 0; tries < 4; tries++) {
    const n = count(padded);
    if (n === target || words === 0) break;
    words = Math.max(0, words + target - n);
    padded = padAnswer(answer, padding(words));
  }
  return padded;
}

export function generate(input: GenerateInput, rng: Rng, logprobRng: Rng, policy: PolicyOptions): Generation {
  const { tokenizer } = input;
  const natural = answerPrompt(input.promptText, rng, policy);
  const target = input.targetTokens ?? null;
  const answer = target === null ? natural : fitAnswerLength(natural, tokenizer, target);
  const answerIds = tokenizer.encode(answer.text);
  const stopTokens = new Set(input.stopTokenIds);
  const maxStopLen = input.stop.reduce((m, s) => Math.max(m, s.length), 0);
  const decoder = tokenizer.streamDecoder({ skipSpecialTokens: input.skipSpecialTokens });

  const tokenIds: number[] = [];
  // Length of the decoded text after each token, before any stop-string cut.
  const decodedLengths: number[] = [];
  let decoded = "";
  let cut: number | null = null;
  let finishReason: FinishReason = "length";
  let stopReason: number | string | null = null;

  for (const id of intendedIds(answerIds, input, rng)) {
    tokenIds.push(id);
    const before = decoded.length;
    decoded += decoder.push(id);
    decodedLengths.push(decoded.length);
    let stopped = false;
    // vLLM checks stops only once min_tokens are out (check_stop returns early before that).
    if (tokenIds.length >= input.minTokens) {
      if (id === tokenizer.eosId && !input.ignoreEos) {
        stopped = true;
      } else if (stopTokens.has(id)) {
        stopped = true;
        stopReason = id;
      } else if (maxStopLen > 0) {
        // Only a match that ends in the new text can be new.
        const from = Math.max(0, before - maxStopLen + 1);
        for (const s of input.stop) {
          if (s === "") continue;
          const at = decoded.indexOf(s, from);
          if (at >= 0) {
            cut = input.includeStopStr ? at + s.length : at;
            stopped = true;
            stopReason = s;
            break;
          }
        }
      }
    }
    if (stopped) {
      finishReason = "stop";
      break;
    }
    if (tokenIds.length >= input.maxTokens) break;
  }
  if (finishReason === "length") {
    // A byte sequence cut short still shows up (as U+FFFD) at the end.
    decoded += decoder.flush();
    decodedLengths[decodedLengths.length - 1] = decoded.length;
  }
  const text = cut === null ? decoded : decoded.slice(0, cut);
  // Streaming shows only text that survives the cut (vLLM holds back possible stop prefixes).
  const deltas: string[] = [];
  let shown = 0;
  for (const length of decodedLengths) {
    const upTo = Math.min(length, text.length);
    deltas.push(text.slice(shown, upTo));
    shown = Math.max(shown, upTo);
  }

  let logprobs: TokenLogprob[] | null = null;
  if (input.logprobs !== null) {
    const k = input.logprobs === -1 ? tokenizer.vocabSize - 1 : input.logprobs;
    logprobs = tokenIds.map((id) => {
      const logprob = sampledLogprob(logprobRng);
      return { id, logprob, alternatives: alternativesFor(tokenizer, id, logprob, k, logprobRng) };
    });
  }

  let promptLogprobs: (PromptLogprob | null)[] | null = null;
  if (input.promptLogprobs !== null) {
    const k = input.promptLogprobs === -1 ? tokenizer.vocabSize - 1 : input.promptLogprobs;
    promptLogprobs = input.promptIds.map((id, i) => {
      if (i === 0) return null;
      const logprob = sampledLogprob(logprobRng);
      // The prompt token ranks first; its top-k list then holds k - 1 others.
      const alternatives = alternativesFor(tokenizer, id, logprob, Math.max(0, k - 1), logprobRng).map(
        (a, j) => ({
          ...a,
          rank: j + 2,
        }),
      );
      return { id, logprob, rank: 1, alternatives };
    });
  }

  return { tokenIds, text, deltas, finishReason, stopReason, answer, logprobs, promptLogprobs };
}

/**
 * What an aborted request reports (finish_reason "abort", e.g. /pause?mode=abort): the first
 * `count` tokens of the generation it was on its way to, with their text and logprobs.
 */
export function truncateGeneration(gen: Generation, count: number): Generation {
  const k = Math.max(0, Math.min(count, gen.tokenIds.length));
  const deltas = gen.deltas.slice(0, k);
  return {
    ...gen,
    tokenIds: gen.tokenIds.slice(0, k),
    text: deltas.join(""),
    deltas,
    finishReason: "abort",
    stopReason: null,
    logprobs: gen.logprobs ? gen.logprobs.slice(0, k) : null,
  };
}
