// Episode records as the page and the exports read them: episode files, groups with their
// verdicts, reward spread, response parts and invalid-turn marks. Pure functions (no DOM), so
// the CLI's export uses them too.
import type { EpisodeFileHeader, EpisodeFileSummary } from "../../../record/episode-file.ts";
import type { GroupResult } from "../../../rollout/batch.ts";
import type { EpisodeRecord, TurnRecord } from "../../../rollout/episode.ts";

/** A number as a short string: integers as they are, others to 3 significant digits. */
export function num(value: number | null | undefined): string {
  // Anything else (a crafted file's string, say) is not a number to show.
  if (typeof value !== "number" || Number.isNaN(value)) return "–";
  if (Number.isInteger(value)) return String(value);
  return Number(value.toPrecision(3)).toString();
}

export type Verdict = "kept" | "dropped" | "failed" | "pending";

export interface GroupView {
  group: number;
  tag: string;
  seed: number;
  episodes: EpisodeRecord[];
  verdict: Verdict;
  /** The filter's score for the group, once known. */
  score: number | null;
}

export function stats(values: readonly number[]): { min: number; max: number; mean: number; std: number } {
  if (values.length === 0) return { min: Number.NaN, max: Number.NaN, mean: Number.NaN, std: Number.NaN };
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const variance = values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length;
  return { min: Math.min(...values), max: Math.max(...values), mean, std: Math.sqrt(variance) };
}

/** The think and answer parts of a response, as the parser sees its tags. */
export function responseParts(raw: string): { think: string | null; answer: string | null } {
  const think = /<think>([\s\S]*?)<\/think>/.exec(raw);
  const answer = /<answer>([\s\S]*?)<\/answer>/.exec(raw);
  return { think: think ? think[1].trim() : null, answer: answer ? answer[1].trim() : null };
}

/** Why a turn counts as invalid, if it does. */
export function invalidMarks(turn: TurnRecord): string[] {
  const marks: string[] = [];
  if (turn.format_penalty) marks.push("format penalty");
  if (turn.actions.length === 0) marks.push("no valid action");
  else if (turn.actions.length < turn.parsed.length)
    marks.push(`${turn.parsed.length - turn.actions.length} action(s) not executed`);
  return marks;
}

export interface ParsedFile {
  header: EpisodeFileHeader;
  episodes: EpisodeRecord[];
  groups: GroupResult[];
  summary: EpisodeFileSummary | null;
}

/** An episode file's lines (the server checked them when it took the upload or shares the file). */
export function parseEpisodeFile(text: string): ParsedFile {
  const parsed: ParsedFile = {
    header: null as unknown as EpisodeFileHeader,
    episodes: [],
    groups: [],
    summary: null,
  };
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const { type, ...rest } = JSON.parse(line);
    if (type === "header") parsed.header = { type, ...rest };
    else if (type === "episode") parsed.episodes.push(rest);
    else if (type === "group") parsed.groups.push(rest);
    else if (type === "summary") parsed.summary = { type, ...rest };
  }
  if (!parsed.header) throw new Error("not a rollgym episode file");
  return parsed;
}

/** The file's groups as the cards show them. */
export function groupViews(file: ParsedFile): GroupView[] {
  const byId = new Map(file.episodes.map((e) => [e.env_id, e]));
  return file.groups.map((g) => ({
    group: g.group_id,
    tag: g.tag,
    seed: g.seed,
    episodes: g.env_ids.map((id) => byId.get(id)).filter((e): e is EpisodeRecord => e !== undefined),
    verdict: g.failed ? "failed" : g.kept ? "kept" : "dropped",
    score: g.score,
  }));
}
