// Running a trainer's rollout: the engine plays the batch, finished groups go to the session's
// outbox (stream: as they finish, behind the buffer bound; batch: the kept groups once the
// filter has decided), then the verdict and RAGEN metrics in a `batch` frame.

import { setImmediate as nextTurn } from "node:timers/promises";
import type { EnvRegistry } from "../../envs/registry.ts";
import { f32Bin, i32Bin, u8Bin } from "../../protocol/codec.ts";
import type { BatchFrame, GroupFrame, ProgressFrame, RolloutRequest } from "../../protocol/messages.ts";
import type { Policy } from "../llm/policy.ts";
import type { EpisodeRecord } from "../record/episode-record.ts";
import { type BatchRequest, runBatch } from "../rollout/batch.ts";
import type { ServerMetrics } from "./metrics.ts";
import type { RolloutDelivery, Session } from "./session.ts";
import type { WatchHub } from "./watch.ts";

/** Group frames built between two turns of the event loop when a batch is delivered. */
const FRAMES_PER_SLICE = 16;

export interface RolloutContext {
  registry: EnvRegistry;
  policy: Policy;
  metrics: ServerMetrics;
  maxBufferedGroups: number;
  groupConcurrency: number;
  /** Watchers get copies of every group and verdict (read-only, lossy). */
  watch?: WatchHub;
}

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

/** Waits for room for `episodes` in the budget and holds them; false when `signal` aborted first. */
export type AdmitEpisodes = (episodes: number, signal: AbortSignal) => Promise<boolean>;

/**
 * Play `request` for `session`; resolves when the batch frame is queued. Budget: with `admit`
 * null the caller has held the whole rollout (batch delivery); otherwise each group is held
 * through `admit` just before it starts (stream delivery). Held episodes move to each group as
 * it is queued (released by its acknowledgement); what is never queued goes back at the end.
 */
export async function runRollout(
  ctx: RolloutContext,
  session: Session,
  frame: RolloutRequest,
  request: BatchRequest,
  admit: AdmitEpisodes | null = null,
): Promise<void> {
  const total = request.tags.reduce((n, t) => n + t.groups, 0) * request.groupSize;
  const delivery: RolloutDelivery = {
    id: frame.id,
    buffered: 0,
    reserved: admit ? 0 : total,
    batch: null,
    waiters: [],
    abort: new AbortController(),
    done: null,
  };
  session.rollouts.set(frame.id, delivery);
  const stream = frame.delivery === "stream";
  const held = new Map<number, EpisodeRecord[]>();
  const queue = (group: number, frameOfGroup: GroupFrame, episodes: number) => {
    delivery.reserved -= episodes;
    session.enqueueGroup(frame.id, group, frameOfGroup, episodes);
  };
  let finished = 0;
  let failed = 0;
  let groupsDone = 0;
  let lastProgress = 0;
  const watched = ctx.watch?.start({
    rollout: frame.id,
    mode: request.mode,
    delivery: frame.delivery,
    tags: request.tags.map(({ tag, groups }) => ({ tag, groups })),
    group_size: request.groupSize,
    seed: request.seed,
  });
  ctx.metrics.rollouts.inc({ mode: request.mode, delivery: frame.delivery });
  ctx.metrics.activeRollouts.inc();

  const progress = (force: boolean) => {
    const now = Date.now();
    if (!force && now - lastProgress < 500) return;
    lastProgress = now;
    const update: ProgressFrame = {
      type: "progress",
      rollout: frame.id,
      episodes_done: finished,
      episodes_total: total,
      groups_done: groupsDone,
      failed,
    };
    // Progress is superseded by the next one: skipped while the client is not reading.
    session.sendDroppable(update);
  };

  delivery.done = (async () => {
    try {
      const batch = await runBatch(ctx.registry, request, ctx.policy, {
        signal: delivery.abort.signal,
        maxConcurrentGroups: ctx.groupConcurrency,
        retainEpisodes: false,
        admitGroup: stream
          ? async () => {
              await session.room(delivery, ctx.maxBufferedGroups);
              if (admit && (await admit(request.groupSize, delivery.abort.signal)))
                delivery.reserved += request.groupSize;
            }
          : undefined,
        onTurn: () => ctx.metrics.turns.inc(),
        onEpisode: (record) => {
          finished++;
          if (record.failure !== null) failed++;
          ctx.metrics.episodes.inc({
            outcome: record.failure !== null ? "failed" : record.success ? "success" : "fail",
          });
          progress(false);
        },
        onGroup: (group, episodes) => {
          groupsDone++;
          watched?.group(group, episodes);
          if (stream) {
            // Its place in the buffer was reserved when the group was admitted.
            queue(group, groupFrame(frame.id, group, episodes, null, null), episodes.length);
          } else {
            held.set(group, episodes);
          }
        },
      });
      progress(true);
      if (!stream) {
        let built = 0;
        for (const g of batch.groups) {
          if (!g.kept) continue;
          // Frames of a large batch are built a few at a time, so other clients are served meanwhile.
          if (++built % FRAMES_PER_SLICE === 0) await nextTurn();
          delivery.buffered++;
          const episodes = held.get(g.group_id) ?? [];
          queue(g.group_id, groupFrame(frame.id, g.group_id, episodes, true, g.score), episodes.length);
        }
        held.clear();
      }
      const verdict: BatchFrame = {
        type: "batch",
        rollout: frame.id,
        kept: batch.groups.filter((g) => g.kept).map((g) => g.group_id),
        dropped: batch.groups.filter((g) => !g.kept && !g.failed).map((g) => g.group_id),
        failed_groups: batch.groups.filter((g) => g.failed).map((g) => g.group_id),
        metrics: batch.metrics,
        episodes: batch.episodes.length,
        failed: batch.failed,
        // Cancelled before they started: no group frame comes for these (they are in failed_groups).
        ...(batch.notStarted.length > 0 ? { not_started: batch.notStarted } : {}),
      };
      delivery.batch = verdict;
      session.enqueue(verdict);
      watched?.verdict(verdict, batch.groups);
    } catch (error) {
      watched?.failed(error instanceof Error ? error.message : String(error));
      session.sendNow({
        type: "error",
        code: "internal",
        message: error instanceof Error ? error.message : String(error),
        rollout: frame.id,
      });
      session.rollouts.delete(frame.id);
    } finally {
      session.release(delivery.reserved);
      delivery.reserved = 0;
      ctx.metrics.activeRollouts.dec();
    }
  })();
  await delivery.done;
}
