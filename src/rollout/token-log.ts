// One episode's token log in token mode: a single growing sequence (the first prompt, then per
// turn the exact sampled ids and the ids inserted before the next turn) with a loss mask over
// exactly the sampled ids, their logprobs at the same positions, turn boundaries, and each
// turn's reward on its last sampled token. It only ever grows: nothing is re-tokenized.
import type { ContinuationTally } from "../llm/token-engine.ts";
import type { TokenRecord } from "../record/episode-record.ts";

/** The version entry of ids no weights sampled: the prompt and the ids inserted between turns. */
export const NOT_SAMPLED = -1;

export class TokenLog {
  readonly ids: number[];
  private readonly mask: number[];
  private readonly logprobs: number[];
  private readonly rewards: number[];
  /** The weight version ordinal that sampled each id (NOT_SAMPLED elsewhere). */
  private readonly versions: number[];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private readonly promptLength: number;
  promptDrift = 0;
  private missing = 0;
  templateDrift: number | null = null;
  /** False when the template check could not run (the engine failed it); drift is then unknown. */
  templateChecked = true;
  /** True when the check was skipped: the engine had verified the template append-only. */
  templateSkipped = false;
  /** How the ids inserted between turns were found. */
  readonly continuations: ContinuationTally = {
    idSpace: 0,
    rendered: 0,
    fallback: null,
    substituted: 0,
  };

  constructor(prompt: readonly number[]) {
    this.ids = [...prompt];
    this.promptLength = prompt.length;
    this.mask = new Array<number>(prompt.length).fill(0);
    this.logprobs = new Array<number>(prompt.length).fill(0);
    this.rewards = new Array<number>(prompt.length).fill(0);
    this.versions = new Array<number>(prompt.length).fill(NOT_SAMPLED);
  }

  get length(): number {
    return this.ids.length;
  }

  /** The id the last turn ended with (the stop token when the engine returned it). */
  get last(): number | undefined {
    return this.ids[this.ids.length - 1];
  }

  /** Appends a turn's sampled ids; `versions` gives each one's weight version (default: all 0, the initial weights). */
  sampled(ids: readonly number[], logprobs: readonly number[], versions?: readonly number[]): void {
    if (ids.length !== logprobs.length)
      throw new RangeError(`${ids.length} sampled ids but ${logprobs.length} logprobs`);
    if (versions !== undefined && versions.length !== ids.length)
      throw new RangeError(`${ids.length} sampled ids but ${versions.length} versions`);
    this.starts.push(this.ids.length);
    for (let i = 0; i < ids.length; i++) {
      this.ids.push(ids[i]);
      this.mask.push(1);
      this.logprobs.push(logprobs[i]);
      if (Number.isNaN(logprobs[i])) this.missing++;
      this.rewards.push(0);
      this.versions.push(versions?.[i] ?? 0);
    }
    this.ends.push(this.ids.length);
  }

  /** The reward of the turn just sampled, on its last sampled id (or dropped on an empty turn). */
  reward(value: number): void {
    const end = this.ends[this.ends.length - 1];
    const start = this.starts[this.starts.length - 1];
    if (end > start) this.rewards[end - 1] = value;
  }

  inserted(ids: readonly number[]): void {
    for (const id of ids) {
      this.ids.push(id);
      this.mask.push(0);
      this.logprobs.push(0);
      this.rewards.push(0);
      this.versions.push(NOT_SAMPLED);
    }
  }

  /** How continuations were found, when any was counted (env sessions' logs count none: their frames stay as they were). */
  private continuationCounts(): Partial<TokenRecord> {
    const { idSpace, rendered } = this.continuations;
    return idSpace + rendered === 0
      ? {}
      : { id_space_continuations: idSpace, rendered_continuations: rendered };
  }

  /** The sampled ids of every turn, concatenated. */
  sampledIds(): number[] {
    return this.ids.filter((_, i) => this.mask[i] === 1);
  }

  /** The log; `versions` only when the episode's turns carry theirs (a version the trainer named was played). */
  record(withVersions = false): TokenRecord {
    return {
      ids: this.ids,
      loss_mask: this.mask,
      logprobs: this.logprobs,
      rewards: this.rewards,
      turn_starts: this.starts,
      turn_ends: this.ends,
      prompt_length: this.promptLength,
      logprobs_missing: this.missing,
      prompt_drift: this.promptDrift,
      template_drift: this.templateChecked ? this.templateDrift : null,
      ...(this.templateChecked ? {} : { template_checked: false }),
      ...(this.templateSkipped ? { template_skipped: true } : {}),
      ...this.continuationCounts(),
      ...(this.continuations.fallback === null ? {} : { continuation_fallback: this.continuations.fallback }),
      ...(withVersions ? { versions: this.versions } : {}),
    };
  }
}

/** Index of the first character where `log` leaves `rendering`, or null when it is a prefix of it. */
export function textDrift(log: string, rendering: string): number | null {
  if (rendering.startsWith(log)) return null;
  let i = 0;
  while (i < log.length && log[i] === rendering[i]) i++;
  return i;
}
