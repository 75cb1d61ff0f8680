// The play every delivery shares: a window of the rollout's groups through the engine
// (rollout/batch.ts), counted the same way in every mode for the progress frames, the metrics,
// the watchers and the memory meter. The delivery decides only when a group may start and what
// becomes of it once finished (GroupHooks).
import type { EnvRegistry } from "../../../envs/registry.ts";
import type { ProgressFrame } from "../../../protocol/messages.ts";
import type { Policy } from "../../llm/policy.ts";
import type { TokenEngine } from "../../llm/token-engine.ts";
import type { BatchResult, EpisodeRecord } from "../../record/episode-record.ts";
import { type BatchRequest, playBatch } from "../../rollout/batch.ts";
import type { PlayMeter } from "../memory-costs.ts";
import type { ServerMetrics } from "../metrics.ts";
import type { Session } from "../session.ts";
import type { WatchedStream } from "../watch.ts";
import type { GroupHooks, WindowPlay } from "./host.ts";

/** What the server lends every rollout's play. */
export interface PlayContext {
  registry: EnvRegistry;
  policy: Policy;
  metrics: ServerMetrics;
  groupConcurrency: number;
}

export interface PlaySetup {
  rollout: string;
  request: BatchRequest;
  tokenEngine: TokenEngine | null;
  signal: AbortSignal;
  meter: PlayMeter;
  /** Where progress frames go. */
  session: Pick<Session, "sendDroppable">;
  watched: WatchedStream | undefined;
  /** An endless stream numbers its episodes across windows and has no total. */
  endless: boolean;
}

/** Between two progress frames that are not forced. */
const PROGRESS_MS = 500;

export class RolloutPlay implements WindowPlay {
  episodes = 0;
  failed = 0;
  private groupsDone = 0;
  private lastProgress = 0;
  private readonly ctx: PlayContext;
  private readonly setup: PlaySetup;
  /** Groups in one window: all of a finite rollout's. */
  private readonly perWindow: number;

  constructor(ctx: PlayContext, setup: PlaySetup) {
    this.ctx = ctx;
    this.setup = setup;
    this.perWindow = setup.request.tags.reduce((n, t) => n + t.groups, 0);
  }

  /** Plays window `w`: its groups are w × perWindow + g, its seeds follow on from the window before. */
  play(w: number, hooks: GroupHooks): Promise<BatchResult> {
    const { ctx } = this;
    const { request, meter, endless, watched } = this.setup;
    const first = w * this.perWindow;
    return playBatch(
      ctx.registry,
      { ...request, seed: request.seed + first },
      ctx.policy,
      this.setup.tokenEngine,
      {
        signal: this.setup.signal,
        maxConcurrentGroups: ctx.groupConcurrency,
        retainEpisodes: false,
        admitGroup: (local) => hooks.admitGroup(first + local),
        onEnvBytes: (local, bytes) => meter.envBytes(first + local, bytes),
        onTurn: (episode, recorded) => {
          ctx.metrics.turns.inc();
          if (recorded) meter.turn(first + episode.groupId, episode.lastTurn!);
        },
        onEpisode: (record) => this.episodeDone({ ...record, group_id: first + record.group_id }),
        onGroup: (local, records) => {
          const group = first + local;
          const episodes = endless ? renumbered(records, group, request.groupSize) : records;
          this.groupsDone++;
          watched?.group(group, episodes);
          hooks.onGroup(group, episodes);
        },
      },
    );
  }

  progress(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastProgress < PROGRESS_MS) return;
    this.lastProgress = now;
    const { rollout, request, endless } = this.setup;
    const update: ProgressFrame = {
      type: "progress",
      rollout,
      episodes_done: this.episodes,
      // A shard's share (group_range) plays its range only.
      episodes_total:
        (endless ? this.groupsDone : (request.groupRange?.count ?? this.perWindow)) * request.groupSize,
      groups_done: this.groupsDone,
      failed: this.failed,
    };
    // Progress is superseded by the next one: skipped while the client is not reading.
    this.setup.session.sendDroppable(update);
  }

  /** `record` is numbered as the rollout numbers its groups (the meter counts by those). */
  private episodeDone(record: EpisodeRecord): void {
    this.setup.meter.episode(record);
    this.episodes++;
    if (record.failure !== null) this.failed++;
    this.ctx.metrics.episodes.inc({
      outcome: record.failure !== null ? "failed" : record.success ? "success" : "fail",
    });
    this.progress(false);
  }
}

/** An endless stream's episodes as the stream numbers them: group `group`, env ids group × size + member. */
function renumbered(records: readonly EpisodeRecord[], group: number, groupSize: number): EpisodeRecord[] {
  return records.map((r, member) => ({ ...r, group_id: group, env_id: group * groupSize + member }));
}
