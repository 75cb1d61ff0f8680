// Env hosting: the trainer owns inference and rollgym plays RAGEN's env manager and context
// manager. Episodes are the engine's own, so given the same responses they end exactly as
// `rollgym rollout` would end them.
import type { EnvRegistry } from "../../envs/registry.ts";
import type { EnvStep } from "../../protocol/messages.ts";
import { type BatchRequest, groupEpisodes, groupTags, tagMetrics } from "../rollout/batch.ts";
import type { Episode, EpisodeRecord } from "../rollout/episode.ts";

export class EnvHostError extends Error {
  readonly code: "unknown_env" | "episode_done" | "bad_frame";
  constructor(code: "unknown_env" | "episode_done" | "bad_frame", message: string) {
    super(message);
    this.name = "EnvHostError";
    this.code = code;
  }
}

export class HostedEnvs {
  readonly request: BatchRequest;
  private readonly episodes: Episode[];

  constructor(registry: EnvRegistry, request: BatchRequest) {
    this.request = request;
    this.episodes = groupTags(request).flatMap((tag, group) => groupEpisodes(registry, request, group, tag));
  }

  opened(): {
    env_id: number;
    group: number;
    seed: number;
    messages: ReturnType<Episode["promptMessages"]>;
  }[] {
    return this.episodes.map((e) => ({
      env_id: e.envId,
      group: e.groupId,
      seed: e.seed,
      messages: e.promptMessages(),
    }));
  }

  /** Apply one response per listed episode; all are checked before any is applied. */
  step(responses: EnvStep["responses"]): Record<string, unknown>[] {
    const seen = new Set<number>();
    for (const { env_id } of responses) {
      const episode = this.episodes[env_id];
      if (!episode)
        throw new EnvHostError(
          "unknown_env",
          `env_id ${env_id} is not open here (0..${this.episodes.length - 1})`,
        );
      if (!episode.active)
        throw new EnvHostError("episode_done", `env_id ${env_id} is done; it takes no more responses`);
      if (seen.has(env_id))
        throw new EnvHostError("bad_frame", `env_id ${env_id} appears twice in one env_step`);
      seen.add(env_id);
    }
    return responses.map(({ env_id, text }) => {
      const episode = this.episodes[env_id];
      const turn = episode.applyResponse(episode.prefill + text, "stop");
      const record = episode.active ? null : episode.record();
      return {
        env_id,
        parsed: turn.parsed,
        actions: turn.actions,
        reward: turn.reward,
        reward_text: turn.reward_text,
        format_penalty: turn.format_penalty,
        done: !episode.active,
        success: record?.success ?? false,
        messages: episode.active ? episode.promptMessages() : null,
      };
    });
  }

  close(): { episodes: EpisodeRecord[]; metrics: Record<string, number> } {
    const episodes = this.episodes.map((e) => e.record());
    return { episodes, metrics: tagMetrics(episodes, this.request) };
  }
}
