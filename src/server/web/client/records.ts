// Episode records as the page and the exports read them: episode files, groups with their
// verdicts, reward spread, response parts and invalid-turn marks. Pure functions (no DOM), so
// the CLI's export uses them too.
import { type EpisodeFile, fileGroups } from "../../../record/episode-reader.ts";
import type { EpisodeRecord, TokenRecord, TurnRecord } from "../../../record/episode-record.ts";

export { parseEpisodeText } from "../../../record/episode-reader.ts";

/** A number as a short string: integers as they are, others to 3 significant digits. */
export function num(value: number | null | undefined): string {
  // Anything else (a crafted file's string, say) is not a number to show.
  if (typeof value !== "number" || Number.isNaN(value)) return "–";
  if (Number.isInteger(value)) return String(value);
  return Number(value.toPrecision(3)).toString();
}

/** "partial": the rollout was interrupted before the group finished, so it has no verdict. */
export type Verdict = "kept" | "dropped" | "failed" | "pending" | "partial";

export interface GroupView {
  group: number;
  tag: string;
  seed: number;
  episodes: EpisodeRecord[];
  verdict: Verdict;
  /** The filter's score for the group, once known. */
  score: number | null;
  /**
   * Endless streams in Watch: the oldest and newest weight version ordinal that played the
   * group's turns (null: no turn was played), and its age once its window's verdict is in (the
   * ordinal in force then − the oldest).
   */
  versions?: { min: number; max: number } | null;
  age?: number | null;
}

/** The oldest and newest version ordinal stamped on the episodes' turns; null when none is. */
export function turnVersions(episodes: readonly EpisodeRecord[]): { min: number; max: number } | null {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const turn of episodes.flatMap((e) => e.turns)) {
    if (!turn.version) continue;
    min = Math.min(min, turn.version.dispatch);
    max = Math.max(max, turn.version.completion);
  }
  return Number.isFinite(min) ? { min, max } : null;
}

export function stats(values: readonly number[]): { min: number; max: number; mean: number; std: number } {
  if (values.length === 0) return { min: Number.NaN, max: Number.NaN, mean: Number.NaN, std: Number.NaN };
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const variance = values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length;
  return { min: Math.min(...values), max: Math.max(...values), mean, std: Math.sqrt(variance) };
}

/** What the two spreads on a group card mean, and why they differ (shown as tooltips and in exports). */
export const SPREAD_HELP = {
  std: "std: the population standard deviation of the group's episode rewards",
  filterScore:
    "filter score: what the group filter ranked the group by; with RAGEN's default metric reward_variance, " +
    "the unbiased standard deviation of the episodes' scores (format penalties included), so it differs from std",
};

/** A token-mode episode's token log in one line: its size and whether it drifted. */
export function tokenSummary(tokens: TokenRecord): string {
  const sampled = tokens.loss_mask.reduce((n, m) => n + m, 0);
  const template =
    tokens.template_checked === false
      ? "not checked (the engine could not render the conversation)"
      : tokens.template_drift === null
        ? "none"
        : `from character ${tokens.template_drift}`;
  return (
    `tokens: ${tokens.ids.length} ids (${tokens.prompt_length} first prompt, ${sampled} sampled, ` +
    `${tokens.ids.length - tokens.prompt_length - sampled} inserted) · prompt drift ${tokens.prompt_drift} ` +
    `request(s) · template drift ${template}`
  );
}

/** The think and answer parts of a response, as the parser sees its tags. */
export function responseParts(raw: string): { think: string | null; answer: string | null } {
  const think = /<think>([\s\S]*?)<\/think>/.exec(raw);
  const answer = /<answer>([\s\S]*?)<\/answer>/.exec(raw);
  return { think: think ? think[1].trim() : null, answer: answer ? answer[1].trim() : null };
}

/** Why a turn of `episode` counts as invalid, if it does. */
export function invalidMarks(turn: TurnRecord, episode: EpisodeRecord): string[] {
  const marks: string[] = [];
  if (turn.format_penalty) marks.push("format penalty");
  if (turn.actions.length === 0) marks.push("no valid action");
  else if (turn.actions.length < turn.parsed.length) {
    // Actions after the one that ended the episode (solved, fell in, budget spent) are skipped
    // by design and cost nothing; only otherwise were they unusable.
    const last = episode.turns[episode.turns.length - 1] === turn;
    const ended = last && (episode.end_reason === "done" || episode.end_reason === "action_budget");
    if (!ended) marks.push(`${turn.parsed.length - turn.actions.length} action(s) not executed`);
  }
  return marks;
}

/** The file's groups as the cards show them. */
export function groupViews(file: EpisodeFile): GroupView[] {
  return fileGroups(file).map((g) => ({
    group: g.group_id,
    tag: g.tag,
    seed: g.seed,
    episodes: g.episodes,
    verdict: g.partial ? "partial" : g.failed ? "failed" : g.kept ? "kept" : "dropped",
    score: g.score,
  }));
}
