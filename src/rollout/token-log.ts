// One episode's token log in token mode: a single growing sequence (the first prompt, then per
// turn the exact sampled ids and the ids inserted before the next turn) with a loss mask over
// exactly the sampled ids, their logprobs at the same positions, turn boundaries, and each
// turn's reward on its last sampled token. It only ever grows: nothing is re-tokenized.
import type { ContinuationTally } from "../llm/token-engine.ts";
import type { TokenRecord } from "../record/episode-record.ts";

/** The version entry of ids no weights sampled: the prompt and the ids inserted between turns. */
export const NOT_SAMPLED = -1;

/**
 * JSON array elements of first prompts, by prompt: a group's members start from one array of ids
 * (TokenEngine.firstPrompt), so they share its serialisation.
 */
const promptElements = new WeakMap<readonly number[], string>();

/** One turn's sampled ids in the log (they start at its entry of `starts`): their logprobs, versions and the turn's reward. */
interface SampledTurn {
  logprobs: readonly number[];
  versions: readonly number[] | undefined;
  reward: number;
}

export class TokenLog {
  readonly ids: number[];
  /**
   * The sampled turns; the per-id arrays (mask, logprobs, rewards, versions) are built from
   * them once, when the record is taken, instead of growing five arrays id by id.
   */
  private readonly turns: SampledTurn[] = [];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private readonly prompt: readonly number[];
  /** The JSON array elements of `ids` up to `jsonCount` (idsJson), extended as the log grows. */
  private elements = "";
  private jsonCount = 0;
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
    this.prompt = prompt;
  }

  get length(): number {
    return this.ids.length;
  }

  /** The id the last turn ended with (the stop token when the engine returned it). */
  get last(): number | undefined {
    return this.ids[this.ids.length - 1];
  }

  /**
   * `ids` as JSON text, the same as JSON.stringify(ids): each turn's request sends the whole
   * log, so only the ids appended since the last call are serialised.
   */
  idsJson(): string {
    const { ids, prompt } = this;
    if (this.jsonCount === 0 && prompt.length > 0) {
      let elements = promptElements.get(prompt);
      if (elements === undefined) {
        elements = JSON.stringify(prompt).slice(1, -1);
        promptElements.set(prompt, elements);
      }
      this.elements = elements;
      this.jsonCount = prompt.length;
    }
    if (this.jsonCount < ids.length) {
      const added = JSON.stringify(ids.slice(this.jsonCount)).slice(1, -1);
      this.elements = this.jsonCount === 0 ? added : `${this.elements},${added}`;
      this.jsonCount = ids.length;
    }
    return `[${this.elements}]`;
  }

  /** Where each turn's sampled ids end (exclusive), in the log. */
  get turnEnds(): readonly number[] {
    return this.ends;
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
      if (Number.isNaN(logprobs[i])) this.missing++;
    }
    this.ends.push(this.ids.length);
    this.turns.push({ logprobs, versions, reward: 0 });
  }

  /** The reward of the turn just sampled, on its last sampled id (or dropped on an empty turn). */
  reward(value: number): void {
    const turn = this.turns[this.turns.length - 1];
    if (turn !== undefined) turn.reward = value;
  }

  inserted(ids: readonly number[]): void {
    for (const id of ids) this.ids.push(id);
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
    return this.starts.flatMap((start, k) => this.ids.slice(start, this.ends[k]));
  }

  /**
   * The log; `versions` only when the episode's turns carry theirs (a version the trainer named
   * was played). Its per-id arrays (mask, logprobs, rewards, versions) are built when first
   * read: a group frame writes them straight into its typed arrays (tokenColumns), so on the
   * stream path they are never built, and the records a group holds until its slowest episode
   * ends stay small.
   */
  record(withVersions = false): TokenRecord {
    const columns = new LogColumns(this.ids.length, this.turns.slice(), this.starts, withVersions);
    let built: ReturnType<LogColumns["arrays"]> | null = null;
    const record = { ids: this.ids } as TokenRecord;
    const lazy = (key: "loss_mask" | "logprobs" | "rewards" | "versions"): void => {
      const settle = (value: number[]) => {
        Object.defineProperty(record, key, { value, writable: true, enumerable: true, configurable: true });
        return value;
      };
      Object.defineProperty(record, key, {
        enumerable: true,
        configurable: true,
        get() {
          if (built === null) {
            built = columns.arrays();
            // Seen arrays may be changed: from now on they are the record's columns.
            sources.delete(record);
          }
          return settle(built[key] as number[]);
        },
        set(value: number[]) {
          sources.delete(record);
          settle(value);
        },
      });
    };
    // In the order the record's keys have always had (files and frames keep it).
    lazy("loss_mask");
    lazy("logprobs");
    lazy("rewards");
    Object.assign(record, {
      turn_starts: this.starts,
      turn_ends: this.ends,
      prompt_length: this.prompt.length,
      logprobs_missing: this.missing,
      prompt_drift: this.promptDrift,
      template_drift: this.templateChecked ? this.templateDrift : null,
      ...(this.templateChecked ? {} : { template_checked: false }),
      ...(this.templateSkipped ? { template_skipped: true } : {}),
      ...this.continuationCounts(),
      ...(this.continuations.fallback === null ? {} : { continuation_fallback: this.continuations.fallback }),
    });
    if (withVersions) lazy("versions");
    sources.set(record, columns);
    return record;
  }
}

/** The columns behind records not read yet (TokenLog.record). */
const sources = new WeakMap<TokenRecord, LogColumns>();

/**
 * What a record's per-id columns are made of, while nobody has read them: a frame writes them
 * into its own typed arrays with `fill`. Undefined once they were read (or for a record not
 * made by a TokenLog): read the record's arrays then.
 */
export function tokenColumns(record: TokenRecord): LogColumns | undefined {
  return sources.get(record);
}

/** A log's sampled turns as per-id columns: 0 (NOT_SAMPLED for versions) wherever no turn sampled. */
export class LogColumns {
  readonly length: number;
  readonly hasVersions: boolean;
  private readonly turns: readonly SampledTurn[];
  private readonly starts: readonly number[];

  constructor(
    length: number,
    turns: readonly SampledTurn[],
    starts: readonly number[],
    hasVersions: boolean,
  ) {
    this.length = length;
    this.turns = turns;
    this.starts = starts;
    this.hasVersions = hasVersions;
  }

  /** Writes the mask, logprobs and rewards from index `at` of each output, which start out zero. */
  fill(mask: Uint8Array, logprobs: Float32Array, rewards: Float32Array, at: number): void {
    this.turns.forEach((turn, k) => {
      const start = at + this.starts[k];
      const count = turn.logprobs.length;
      for (let i = 0; i < count; i++) {
        mask[start + i] = 1;
        logprobs[start + i] = turn.logprobs[i];
      }
      if (count > 0) rewards[start + count - 1] = turn.reward;
    });
  }

  /** Writes each id's version from index `at` (NOT_SAMPLED where no turn sampled). */
  fillVersions(versions: Int32Array, at: number): void {
    versions.fill(NOT_SAMPLED, at, at + this.length);
    this.turns.forEach((turn, k) => {
      const start = at + this.starts[k];
      for (let i = 0; i < turn.logprobs.length; i++) versions[start + i] = turn.versions?.[i] ?? 0;
    });
  }

  /** The oldest and newest version that sampled any id, or null when none did (or versions are not kept). */
  versionRange(): { min: number; max: number } | null {
    if (!this.hasVersions) return null;
    let min = Number.POSITIVE_INFINITY;
    let max = Number.NEGATIVE_INFINITY;
    for (const turn of this.turns)
      for (let i = 0; i < turn.logprobs.length; i++) {
        const v = turn.versions?.[i] ?? 0;
        if (v < min) min = v;
        if (v > max) max = v;
      }
    return Number.isFinite(min) ? { min, max } : null;
  }

  /** The columns as the record's arrays. */
  arrays(): { loss_mask: number[]; logprobs: number[]; rewards: number[]; versions: number[] | null } {
    const n = this.length;
    // Each entry written once, in order: Array#fill measured several times slower once the server is loaded.
    const mask = new Array<number>(n);
    const logprobs = new Array<number>(n);
    const rewards = new Array<number>(n);
    const versions = this.hasVersions ? new Array<number>(n) : null;
    let at = 0;
    const unsampledTo = (end: number): void => {
      for (; at < end; at++) {
        mask[at] = 0;
        logprobs[at] = 0;
        rewards[at] = 0;
        if (versions !== null) versions[at] = NOT_SAMPLED;
      }
    };
    for (const [k, turn] of this.turns.entries()) {
      unsampledTo(this.starts[k]);
      const count = turn.logprobs.length;
      for (let i = 0; i < count; i++, at++) {
        mask[at] = 1;
        logprobs[at] = turn.logprobs[i];
        rewards[at] = 0;
        if (versions !== null) versions[at] = turn.versions?.[i] ?? 0;
      }
      if (count > 0) rewards[at - 1] = turn.reward;
    }
    unsampledTo(n);
    return { loss_mask: mask, logprobs, rewards, versions };
  }
}

/** Index of the first character where `log` leaves `rendering`, or null when it is a prefix of it. */
export function textDrift(log: string, rendering: string): number | null {
  if (rendering.startsWith(log)) return null;
  let i = 0;
  while (i < log.length && log[i] === rendering[i]) i++;
  return i;
}
