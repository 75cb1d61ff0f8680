// A group frame as the protocol sends it: the episode records as maps, their token logs as
// typed arrays (PROTOCOL.md "Token logs"), and once a trainer has used weight updates the
// versions that produced them (PROTOCOL.md "Versions"); before that, frames carry no version
// field at all, so a client that never heard of versions sees the bytes it always did.
import {
  f32Bin,
  f32BinOf,
  f32Bytes,
  i32Bin,
  i32BinOf,
  i32Bytes,
  u8Bin,
  u8BinOf,
} from "../../protocol/codec.ts";
import type { GroupFrame } from "../../protocol/messages.ts";
import type { EpisodeRecord, TokenRecord } from "../record/episode-record.ts";
import { type LogColumns, tokenColumns } from "../rollout/token-log.ts";

/** What a frame adds beyond its episodes. */
export interface GroupFrameExtras {
  /** Send versions (per turn, per token, the group's range); false strips any the records hold. */
  versions?: boolean;
  window?: number;
  admitted?: GroupFrame["admitted"];
}

export function groupFrame(
  rollout: string,
  group: number,
  records: readonly EpisodeRecord[],
  kept: boolean | null,
  score: number | null,
  extras: GroupFrameExtras = {},
): GroupFrame {
  const episodes = records.map(extras.versions ? withVersions : withoutVersions);
  const range = extras.versions ? versionRange(episodes) : null;
  // Looked up once: the token arrays and versions are written from the logs while none was read.
  const columns = unreadColumns(episodes);
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
    ...tokenArrays(episodes, columns),
    ...(range ? { min_version: range.min, max_version: range.max } : {}),
    ...(extras.versions ? tokenVersions(episodes, columns) : {}),
    ...(extras.window !== undefined ? { window: extras.window } : {}),
    ...(extras.admitted ? { admitted: extras.admitted } : {}),
  };
}

/** The oldest and newest ordinal that produced any of the episodes' turns or tokens; null when none is known. */
export function versionRange(episodes: readonly EpisodeRecord[]): { min: number; max: number } | null {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const episode of episodes) {
    for (const turn of episode.turns) {
      if (!turn.version) continue;
      min = Math.min(min, turn.version.dispatch);
      max = Math.max(max, turn.version.completion);
    }
    const columns = episode.tokens && tokenColumns(episode.tokens);
    if (columns) {
      const range = columns.versionRange();
      if (range) {
        min = Math.min(min, range.min);
        max = Math.max(max, range.max);
      }
      continue;
    }
    for (const v of episode.tokens?.versions ?? []) {
      if (v < 0) continue;
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
  }
  return Number.isFinite(min) ? { min, max } : null;
}

/**
 * The record with every version field: records carry none until a turn of theirs ran under a
 * version the trainer named, so a missing stamp is ordinal 0 (a copy only when one is missing).
 */
function withVersions(episode: EpisodeRecord): EpisodeRecord {
  const turnsMissing = episode.turns.some((t) => t.version === undefined);
  const tokensMissing = episode.tokens !== undefined && episode.tokens.versions === undefined;
  if (!turnsMissing && !tokensMissing) return episode;
  const copy = { ...episode };
  if (turnsMissing)
    copy.turns = episode.turns.map((t) =>
      t.version ? t : { ...t, version: { dispatch: 0, completion: 0 } },
    );
  if (tokensMissing)
    copy.tokens = { ...episode.tokens!, versions: episode.tokens!.loss_mask.map((m) => (m ? 0 : -1)) };
  return copy;
}

/** The record as a client that never used versions knows it (a copy only when it holds any). */
function withoutVersions(episode: EpisodeRecord): EpisodeRecord {
  const turnsHave = episode.turns.some((t) => t.version !== undefined);
  if (!turnsHave && episode.tokens?.versions === undefined) return episode;
  const copy = { ...episode };
  if (turnsHave) copy.turns = episode.turns.map(({ version: _v, ...turn }) => turn);
  if (copy.tokens?.versions !== undefined) {
    const { versions: _v, ...tokens } = copy.tokens;
    copy.tokens = tokens;
  }
  return copy;
}

/** Token mode: each id's ordinal, aligned with token_ids_i32 (only when every log has them). */
function tokenVersions(
  episodes: readonly EpisodeRecord[],
  columns: LogColumns[] | null,
): Partial<GroupFrame> {
  if (episodes.length === 0) return {};
  if (columns !== null) {
    if (!columns.every((c) => c.hasVersions)) return {};
    const versions = new Int32Array(totalIds(columns));
    let at = 0;
    for (const c of columns) {
      c.fillVersions(versions, at);
      at += c.length;
    }
    return { token_versions_i32: i32Bytes(versions) };
  }
  if (!episodes.every((e) => e.tokens?.versions)) return {};
  return { token_versions_i32: i32BinOf(episodes.map((e) => e.tokens!.versions!)) };
}

/** The record without its token arrays (the drift figures stay in the map). */
function withoutTokenArrays(episode: EpisodeRecord): EpisodeRecord | Record<string, unknown> {
  if (!episode.tokens) return episode;
  const { tokens, ...rest } = episode;
  return {
    ...rest,
    // The per-id versions travel as token_versions_i32.
    tokens: {
      prompt_drift: tokens.prompt_drift,
      template_drift: tokens.template_drift,
      logprobs_missing: tokens.logprobs_missing,
    },
  };
}

/** Every episode's token log, concatenated into one typed array per field (PROTOCOL.md). */
function tokenArrays(episodes: readonly EpisodeRecord[], columns: LogColumns[] | null): Partial<GroupFrame> {
  if (episodes.length === 0 || !episodes.every((e) => e.tokens)) return {};
  const logs = episodes.map((e) => e.tokens!);
  const offsets = [0];
  for (const log of logs) offsets.push(offsets[offsets.length - 1] + log.ids.length);
  return {
    token_offsets_i32: i32Bin(offsets),
    token_ids_i32: i32BinOf(logs.map((l) => l.ids)),
    ...sampledColumns(logs, columns),
    prompt_lengths_i32: i32Bin(logs.map((l) => l.prompt_length)),
    turn_counts_i32: i32Bin(logs.map((l) => l.turn_starts.length)),
    turn_starts_i32: i32BinOf(logs.map((l) => l.turn_starts)),
    turn_ends_i32: i32BinOf(logs.map((l) => l.turn_ends)),
  };
}

/** The mask, logprobs and rewards columns: written from the logs' turns while no record's arrays were read. */
function sampledColumns(logs: readonly TokenRecord[], columns: LogColumns[] | null): Partial<GroupFrame> {
  if (columns === null)
    return {
      loss_mask_u8: u8BinOf(logs.map((l) => l.loss_mask)),
      logprobs_f32: f32BinOf(logs.map((l) => l.logprobs)),
      token_rewards_f32: f32BinOf(logs.map((l) => l.rewards)),
    };
  const n = totalIds(columns);
  const mask = new Uint8Array(n);
  const logprobs = new Float32Array(n);
  const rewards = new Float32Array(n);
  let at = 0;
  for (const c of columns) {
    c.fill(mask, logprobs, rewards, at);
    at += c.length;
  }
  return { loss_mask_u8: mask, logprobs_f32: f32Bytes(logprobs), token_rewards_f32: f32Bytes(rewards) };
}

/** Every episode's unread log columns, or null when any was read (or not made by a TokenLog). */
function unreadColumns(episodes: readonly EpisodeRecord[]): LogColumns[] | null {
  const columns: LogColumns[] = [];
  for (const e of episodes) {
    const c = e.tokens && tokenColumns(e.tokens);
    if (!c) return null;
    columns.push(c);
  }
  return columns;
}

function totalIds(columns: readonly LogColumns[]): number {
  let n = 0;
  for (const c of columns) n += c.length;
  return n;
}
