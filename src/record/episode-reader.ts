// The one reader of episode files (JSON lines written by `rollgym rollout --out`): every line
// and every field the readers use is checked here, so `show`, `export`, uploads, shared files
// and the web page see the same, well-typed file or the same error naming the line and field.
// Pure (no Node or DOM imports): the page loads this module as it is.

import { isPlainObject } from "../../protocol/plain-object.ts";
import type { Code } from "../errors/catalogue.ts";
import type { EpisodeRecord, GroupResult } from "./episode-record.ts";

export const EPISODE_FILE_FORMAT = "rollgym.episodes";
export const EPISODE_FILE_VERSION = 1;

export interface EpisodeFileHeader {
  type: "header";
  format: typeof EPISODE_FILE_FORMAT;
  version: number;
  mode: string;
  seed: number;
  group_size: number;
  tags: { tag: string; groups: number }[];
  policy: string;
  /** Token mode: which distribution the logged logprobs come from (docs/rollouts.md). */
  logprobs?: string;
  /** The settings the rollout ran with (context mode, turns, sampling, filter …). */
  settings: Record<string, unknown>;
  /** Wall-clock facts, only with --timings. */
  timings?: Record<string, number | string>;
}

export interface EpisodeFileSummary {
  type: "summary";
  episodes: number;
  failed: number;
  kept_groups: number[];
  /** JSON has no NaN: a metric that was NaN reads back as null. */
  metrics: Record<string, number | null>;
  /** Set when a signal stopped the rollout: only the episodes that finished are in the file. */
  interrupted?: string;
}

export interface EpisodeFile {
  header: EpisodeFileHeader;
  episodes: EpisodeRecord[];
  groups: GroupResult[];
  summary: EpisodeFileSummary;
}

/**
 * A file that is not a usable episode file: the line (1-based) and, when one is at fault, the
 * field. The page loads this module, which cannot import the catalogue: the code is a string.
 */
export class EpisodeFileError extends Error {
  readonly code = "episode_file" satisfies Code;
  readonly line: number;
  readonly field: string | undefined;
  readonly reason: string;

  constructor(source: string | null, line: number, reason: string, field?: string) {
    super(`${source === null ? "line " : `${source}:`}${line}: ${reason}`);
    this.name = "EpisodeFileError";
    this.line = line;
    this.field = field;
    this.reason = reason;
  }
}

/** A field with a value it may not have; `at` is filled in on the way out, where it becomes an EpisodeFileError. */
class FieldProblem extends Error {
  readonly code = "episode_file" satisfies Code;
  at: string[] = [];
}

type Check = (value: unknown) => void;

function shown(value: unknown): string {
  const text = value === undefined ? "nothing" : JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}…` : text;
}

function expect(ok: boolean, value: unknown, allowed: string): void {
  if (!ok) throw new FieldProblem(`got ${shown(value)}, expected ${allowed}`);
}

function inside(key: string, run: () => void): void {
  try {
    run();
  } catch (error) {
    if (error instanceof FieldProblem) error.at.unshift(key);
    throw error;
  }
}

const number: Check = (v) => expect(typeof v === "number" && Number.isFinite(v), v, "a number");
const integer: Check = (v) => expect(Number.isSafeInteger(v), v, "an integer");
const count: Check = (v) => expect(Number.isSafeInteger(v) && (v as number) >= 0, v, "an integer ≥ 0");
const text: Check = (v) => expect(typeof v === "string", v, "text");
const flag: Check = (v) => expect(typeof v === "boolean", v, "true or false");
const nullable =
  (check: Check): Check =>
  (v) => {
    if (v !== null) check(v);
  };
const oneOf =
  (...allowed: readonly unknown[]): Check =>
  (v) =>
    expect(allowed.includes(v), v, allowed.map((a) => JSON.stringify(a)).join(" or "));
const either =
  (a: Check, b: Check, allowed: string): Check =>
  (v) => {
    for (const check of [a, b]) {
      try {
        return check(v);
      } catch (error) {
        if (!(error instanceof FieldProblem)) throw error;
      }
    }
    expect(false, v, allowed);
  };

const list =
  (item: Check): Check =>
  (v) => {
    expect(Array.isArray(v), v, "a list");
    // Token logs run to hundreds of thousands of ids: one plain loop, no closure per element.
    const values = v as unknown[];
    for (let i = 0; i < values.length; i++) {
      try {
        item(values[i]);
      } catch (error) {
        if (error instanceof FieldProblem) error.at.unshift(`[${i}]`);
        throw error;
      }
    }
  };
const table =
  (item: Check): Check =>
  (v) => {
    expect(isPlainObject(v), v, "an object");
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) inside(k, () => item(x));
  };

/** An object whose listed fields have the given types; fields ending in "?" may be absent. */
const shape =
  (fields: Record<string, Check>): Check =>
  (v) => {
    expect(isPlainObject(v), v, "an object");
    const record = v as Record<string, unknown>;
    for (const [name, check] of Object.entries(fields)) {
      const optional = name.endsWith("?");
      const key = optional ? name.slice(0, -1) : name;
      if (optional && record[key] === undefined) continue;
      inside(key, () => check(record[key]));
    }
  };

const tokenRecord = shape({
  ids: list(count),
  loss_mask: list(oneOf(0, 1)),
  // null where the engine reported no logprob (NaN when written; docs/rollouts.md).
  logprobs: list(nullable(number)),
  rewards: list(number),
  turn_starts: list(count),
  turn_ends: list(count),
  prompt_length: count,
  "logprobs_missing?": count,
  prompt_drift: count,
  template_drift: nullable(count),
  "template_checked?": oneOf(false),
  "template_skipped?": oneOf(true),
  "id_space_continuations?": count,
  "rendered_continuations?": count,
  "continuation_fallback?": text,
});

const turnRecord = shape({
  turn: count,
  state: text,
  actions_left: integer,
  warned: flag,
  raw_response: text,
  response: text,
  parsed: list(text),
  actions: list(text),
  reward: number,
  reward_text: text,
  format_penalty: flag,
  info: table(either(number, flag, "a number or true or false")),
  finish_reason: text,
  "prompt_tokens?": count,
  "completion_tokens?": count,
  "cached_tokens?": count,
  "context_dropped?": count,
  "ambiguous_split?": oneOf(true),
});

const episodeLine = shape({
  env_id: count,
  group_id: count,
  tag: text,
  seed: integer,
  turns: list(turnRecord),
  final_state: text,
  num_actions: count,
  terminated: flag,
  truncated: flag,
  success: flag,
  reward: number,
  penalty: number,
  score: number,
  metrics: table(nullable(number)),
  failure: nullable(text),
  end_reason: oneOf("done", "action_budget", "max_turn", "context_full", "failed"),
  "tokens?": tokenRecord,
});

const groupLine = shape({
  group_id: count,
  tag: text,
  seed: integer,
  env_ids: list(count),
  score: nullable(number),
  kept: flag,
  failed: flag,
});

const headerLine = shape({
  mode: text,
  seed: integer,
  group_size: count,
  tags: list(shape({ tag: text, groups: count })),
  policy: text,
  "logprobs?": text,
  settings: table(() => {}),
  "timings?": table(either(number, text, "a number or text")),
});

const summaryLine = shape({
  episodes: count,
  failed: count,
  kept_groups: list(count),
  metrics: table(nullable(number)),
  "interrupted?": text,
});

const LINES: Record<string, Check> = {
  header: headerLine,
  episode: episodeLine,
  group: groupLine,
  summary: summaryLine,
};

/**
 * Reads an episode file line by line (so a large file streams through it): `line` for each
 * line in order, then `finish`. Throws an EpisodeFileError at the first problem.
 */
export class EpisodeFileReader {
  private readonly source: string | null;
  private header: EpisodeFileHeader | null = null;
  private summary: EpisodeFileSummary | null = null;
  private readonly episodes: EpisodeRecord[] = [];
  private readonly groups: GroupResult[] = [];
  private readonly envIds = new Set<number>();
  private readonly groupIds = new Set<number>();
  private readonly keep: boolean;
  private n = 0;

  /**
   * `source` (a path, a name) starts error messages; without it they start "line N". With
   * `keep: false` records are checked and counted but not held (a server checking an upload).
   */
  constructor(source: string | null = null, { keep = true } = {}) {
    this.source = source;
    this.keep = keep;
  }

  /** Episode lines read so far. */
  get episodeCount(): number {
    return this.envIds.size;
  }

  line(line: string): void {
    const n = ++this.n;
    if (line.trim() === "") return;
    const fail = (reason: string, field?: string) => new EpisodeFileError(this.source, n, reason, field);
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw fail("not a JSON line");
    }
    if (!isPlainObject(value)) throw fail("not a JSON object");
    const { type, ...rest } = value;
    if (this.header === null) {
      if (type !== "header" || value.format !== EPISODE_FILE_FORMAT)
        throw fail(
          `not a rollgym episode file (the first line must be a ${EPISODE_FILE_FORMAT} header)`,
          "header.format",
        );
      if (value.version !== EPISODE_FILE_VERSION)
        throw fail(
          `version ${shown(value.version)} is not supported (this rollgym reads ${EPISODE_FILE_VERSION})`,
          "header.version",
        );
    }
    if (this.summary !== null) throw fail("a line after the summary (the summary is the last line)");
    if (typeof type !== "string" || !Object.hasOwn(LINES, type))
      throw fail(`unknown line type ${shown(type)}; allowed: "episode", "group", "summary"`);
    try {
      LINES[type](rest);
    } catch (error) {
      if (!(error instanceof FieldProblem)) throw error;
      const field = `${type}.${error.at.join(".").replaceAll(".[", "[")}`;
      throw fail(`${field}: ${error.message}`, field);
    }
    if (type === "header") {
      if (this.header !== null) throw fail("a second header line");
      this.header = value as unknown as EpisodeFileHeader;
    } else if (type === "episode" || type === "group") {
      const [ids, key, kept] =
        type === "episode"
          ? [this.envIds, "env_id", this.episodes as unknown[]]
          : [this.groupIds, "group_id", this.groups as unknown[]];
      const id = rest[key] as number;
      if (ids.has(id)) throw fail(`${type}.${key}: ${id} appears twice`, `${type}.${key}`);
      ids.add(id);
      if (this.keep) kept.push(rest);
    } else this.summary = value as unknown as EpisodeFileSummary;
  }

  finish(): EpisodeFile {
    if (this.header === null) throw new EpisodeFileError(this.source, 1, "the file is empty");
    if (this.summary === null)
      throw new EpisodeFileError(this.source, this.n, "no summary line (was the file cut short?)");
    return { header: this.header, episodes: this.episodes, groups: this.groups, summary: this.summary };
  }
}

/** A whole episode file held as text (an upload, a file the page fetched). */
export function parseEpisodeText(text: string, source: string | null = null): EpisodeFile {
  return readLines(new EpisodeFileReader(source), text).finish();
}

/** Checks `text` as an episode file without holding its records; returns its episode count. */
export function checkEpisodeText(text: string): { episodes: number } {
  const reader = readLines(new EpisodeFileReader(null, { keep: false }), text);
  reader.finish();
  return { episodes: reader.episodeCount };
}

function readLines(reader: EpisodeFileReader, text: string): EpisodeFileReader {
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    reader.line(text.slice(start, text[end - 1] === "\r" ? end - 1 : end));
    start = end + 1;
  }
  return reader;
}

/** A group as readers show it: whole (its group line is in the file) or partial. */
export interface FileGroup extends GroupResult {
  /**
   * The rollout stopped (a signal) before the group finished: the file holds the episodes
   * that did, but no group line, so the filter never scored it.
   */
  partial: boolean;
  /** Its episodes in the file, by env id. */
  episodes: EpisodeRecord[];
}

/** Every group with episodes in the file, partial ones included, by group id. */
export function fileGroups(file: EpisodeFile): FileGroup[] {
  const byId = new Map(file.episodes.map((e) => [e.env_id, e]));
  const groups: FileGroup[] = file.groups.map((g) => ({
    ...g,
    partial: false,
    episodes: g.env_ids.map((id) => byId.get(id)).filter((e): e is EpisodeRecord => e !== undefined),
  }));
  const whole = new Set(file.groups.map((g) => g.group_id));
  const partial = new Map<number, EpisodeRecord[]>();
  for (const e of file.episodes) {
    if (whole.has(e.group_id)) continue;
    const list = partial.get(e.group_id) ?? [];
    list.push(e);
    partial.set(e.group_id, list);
  }
  for (const [id, episodes] of partial) {
    episodes.sort((a, b) => a.env_id - b.env_id);
    groups.push({
      group_id: id,
      tag: episodes[0].tag,
      seed: episodes[0].seed,
      env_ids: episodes.map((e) => e.env_id),
      score: null,
      kept: false,
      failed: false,
      partial: true,
      episodes,
    });
  }
  return groups.sort((a, b) => a.group_id - b.group_id);
}
