// A group frame as the protocol sends it: the episode records as maps, their token logs as
// typed arrays (PROTOCOL.md "Token logs").
import { f32Bin, i32Bin, u8Bin } from "../../protocol/codec.ts";
import type { GroupFrame } from "../../protocol/messages.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";

export function groupFrame(
  rollout: string,
  group: number,
  episodes: readonly EpisodeRecord[],
  kept: boolean | null,
  score: number | null,
): GroupFrame {
  return {
    type: "group",
    rollout,
    group,
    seq: 0,
    tag: episodes[0]?.tag ?? "",
    seed: episodes[0]?.seed ?? 0,
    kept,
    score,
    // Episode records travel as plain maps; token logs travel as typed arrays instead.
    episodes: episodes.map(withoutTokenArrays) as unknown as GroupFrame["episodes"],
    env_ids_i32: i32Bin(episodes.map((e) => e.env_id)),
    scores_f32: f32Bin(episodes.map((e) => e.score)),
    rewards_f32: f32Bin(episodes.map((e) => e.reward)),
    penalties_f32: f32Bin(episodes.map((e) => e.penalty)),
    success_u8: u8Bin(episodes.map((e) => (e.success ? 1 : 0))),
    ...tokenArrays(episodes),
  };
}

/** The record without its token arrays (the drift figures stay in the map). */
function withoutTokenArrays(episode: EpisodeRecord): EpisodeRecord | Record<string, unknown> {
  if (!episode.tokens) return episode;
  const { tokens, ...rest } = episode;
  return {
    ...rest,
    tokens: {
      prompt_drift: tokens.prompt_drift,
      template_drift: tokens.template_drift,
      logprobs_missing: tokens.logprobs_missing,
    },
  };
}

/** Every episode's token log, concatenated into one typed array per field (PROTOCOL.md). */
function tokenArrays(episodes: readonly EpisodeRecord[]): Partial<GroupFrame> {
  if (episodes.length === 0 || !episodes.every((e) => e.tokens)) return {};
  const logs = episodes.map((e) => e.tokens!);
  const offsets = [0];
  for (const log of logs) offsets.push(offsets[offsets.length - 1] + log.ids.length);
  const all = <T>(pick: (log: (typeof logs)[number]) => readonly T[]): T[] =>
    logs.flatMap((log) => pick(log));
  return {
    token_offsets_i32: i32Bin(offsets),
    token_ids_i32: i32Bin(all((l) => l.ids)),
    loss_mask_u8: u8Bin(all((l) => l.loss_mask)),
    logprobs_f32: f32Bin(all((l) => l.logprobs)),
    token_rewards_f32: f32Bin(all((l) => l.rewards)),
    prompt_lengths_i32: i32Bin(logs.map((l) => l.prompt_length)),
    turn_counts_i32: i32Bin(logs.map((l) => l.turn_starts.length)),
    turn_starts_i32: i32Bin(all((l) => l.turn_starts)),
    turn_ends_i32: i32Bin(all((l) => l.turn_ends)),
  };
}
