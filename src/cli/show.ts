// `rollgym show FILE`: an episode file (rollout --out) for people: every selected episode turn
// by turn, with the board the model saw, its response, the actions taken and the reward.
import { fileGroups } from "../record/episode-reader.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";
import { tokenSummary } from "../server/web/client/records.ts";
import { expectPositionals, type FlagSpec, parseArgs, parseChoice } from "./args.ts";
import { parseIdList, readEpisodeFileOrExplain } from "./episode-files.ts";
import { io, printable } from "./io.ts";
import { blockLines as block } from "./output.ts";

const OUTCOMES = ["solved", "unsolved", "failed"] as const;
type Outcome = (typeof OUTCOMES)[number];

export const SHOW_FLAGS: Record<string, FlagSpec> = {
  group: { kind: "value", arg: "N,…", help: "only these groups (group ids, comma-separated)" },
  episode: { kind: "value", arg: "N,…", help: "only these episodes (env ids, comma-separated)" },
  outcome: {
    kind: "value",
    arg: "O,…",
    help: `only episodes that ended so: ${OUTCOMES.join(", ")} (failed = could not be played to the end)`,
  },
  tag: { kind: "value", arg: "T,…", help: "only episodes of these tags" },
  raw: {
    kind: "switch",
    help: "show the raw model output (with prefill) instead of RAGEN's rebuilt response",
  },
};

function outcomeOf(e: EpisodeRecord): Outcome {
  if (e.failure !== null) return "failed";
  return e.success ? "solved" : "unsolved";
}

function list(text: string): string[] {
  return text.split(",").map((s) => s.trim());
}

export async function showCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("show", argv, SHOW_FLAGS);
  const [path] = expectPositionals("show", args, ["FILE"]);
  const file = await readEpisodeFileOrExplain("show", path);
  const groupText = args.values.get("group");
  const episodeText = args.values.get("episode");
  const groups =
    groupText && parseIdList("--group", groupText, new Set(file.episodes.map((e) => e.group_id)), "group");
  const episodes =
    episodeText &&
    parseIdList("--episode", episodeText, new Set(file.episodes.map((e) => e.env_id)), "episode");
  const outcomeText = args.values.get("outcome");
  const outcomes =
    outcomeText && new Set(list(outcomeText).map((o) => parseChoice("--outcome", o, OUTCOMES)));
  const tagText = args.values.get("tag");
  const tagsInFile = new Set(file.episodes.map((e) => e.tag));
  const tags = tagText && new Set(list(tagText).map((t) => parseChoice("--tag", t, [...tagsInFile])));

  const selected = file.episodes.filter(
    (e) =>
      (!groups || groups.has(e.group_id)) &&
      (!episodes || episodes.has(e.env_id)) &&
      (!outcomes || outcomes.has(outcomeOf(e))) &&
      (!tags || tags.has(e.tag)),
  );
  const { header, summary } = file;
  const partial = fileGroups(file).filter((g) => g.partial).length;
  const lines: string[] = [
    `${path}: ${header.mode} rollout, seed ${header.seed}, ${header.tags.map((t) => `${t.tag} × ${t.groups}`).join(" + ")} groups of ${header.group_size}, policy ${header.policy}`,
    `${summary.episodes} episodes, ${summary.failed} failed, ${summary.kept_groups.length} groups kept` +
      `${summary.interrupted ? `, interrupted by ${summary.interrupted}` : ""}` +
      `${partial ? ` (${partial} group${partial > 1 ? "s" : ""} partial: stopped before finishing, so not filtered)` : ""}; showing ${selected.length}`,
  ];
  const raw = args.switches.has("raw");
  for (const e of selected) lines.push("", ...episodeLines(e, raw));
  const { stdout } = io();
  // Model output and file fields go to a terminal: no escape sequences get through.
  stdout.write(`${printable(lines.join("\n"))}\n`);
}

function episodeLines(e: EpisodeRecord, raw: boolean): string[] {
  const outcome = outcomeOf(e);
  const lines = [
    `━━ episode ${e.env_id} · group ${e.group_id} · ${e.tag} seed ${e.seed} · ${outcome}` +
      ` · reward ${num(e.reward)} · score ${num(e.score)} · ${e.turns.length} turns, ${e.num_actions} actions (${e.end_reason})`,
  ];
  if (e.failure !== null) lines.push(`failure: ${e.failure}`);
  if (e.tokens) lines.push(tokenSummary(e.tokens));
  for (const t of e.turns) {
    lines.push(
      `── turn ${t.turn}: ${t.actions_left} actions left${t.warned ? ", warned about the last answer" : ""}`,
    );
    lines.push(...block(t.state));
    lines.push(`response${raw ? " (raw)" : ""}:`, ...block(raw ? t.raw_response : t.response));
    const penalty = t.format_penalty ? " · format penalty" : "";
    const parsed = t.parsed.join(", ");
    lines.push(
      `actions: ${t.actions.length ? t.actions.join(", ") : "(none)"}` +
        `${parsed !== t.actions.join(", ") ? ` (parsed: ${parsed || "nothing"})` : ""}` +
        ` · reward ${t.reward_text}${penalty} · ${t.finish_reason}`,
    );
  }
  lines.push("── final state", ...block(e.final_state));
  return lines;
}

function num(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Math.round(value * 1e6) / 1e6);
}
