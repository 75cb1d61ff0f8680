// A `rollout` with `played_episodes`: the verdict of a rollout whose groups several servers played
// in shares (`group_range`, PROTOCOL.md "Shards"). The episodes the shards' group frames carried
// go through the scoring, filter and metrics one server's batch goes through (rollout/batch.ts
// settleBatch), so a sharded batch is judged exactly as one server judges it, by one
// implementation. Nothing is played or held: the batch frame is the whole answer.
import { unknownTagMessage } from "../../../envs/registry.ts";
import type { PlayedEpisode, RolloutRequest } from "../../../protocol/messages.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import type { EpisodeRecord } from "../../record/episode-record.ts";
import {
  type BatchRequest,
  contextTally,
  groupLocalScores,
  groupTags,
  settleBatch,
} from "../../rollout/batch.ts";
import { resolveRequest } from "../../rollout/request.ts";
import { drawsRandomSeed } from "../admission.ts";
import { batchVerdict } from "../delivery/verdicts.ts";
import type { Connection } from "./context.ts";

export function onPlayedEpisodes(
  c: Connection,
  frame: RolloutRequest,
  episodes: readonly PlayedEpisode[],
): void {
  const { state } = c;
  const unknown = frame.tags.find((t) => !state.registry.hasTag(t.tag));
  if (unknown)
    throw new RollgymError(
      "unknown_tag",
      { message: unknownTagMessage(unknown.tag, state.registry.tagNames()) },
      "tags",
    );
  if (frame.group_range)
    throw refuse("played_episodes", "played_episodes are the whole rollout's: leave group_range out");
  if (frame.endless === true)
    throw refuse(
      "played_episodes",
      "played_episodes judge a finite rollout; an endless stream's windows are judged by its own server",
    );
  if (drawsRandomSeed(state, frame))
    throw refuse(
      "seed",
      "this server draws a random train seed (seed.train null): pass the seed the shards played",
    );
  const request = resolveRequest(state.config, frame);
  if (!groupLocalScores(request)) throw new RollgymError("stream_scores", {}, "played_episodes");
  const records = checkedEpisodes(episodes, request);
  const result = settleBatch(records, request, [], contextTally(records));
  c.worked();
  c.reply({ ...batchVerdict(frame.id, result, new Set()), group_scores: result.groups.map((g) => g.score) });
}

function refuse(field: string, message: string): RollgymError {
  return new RollgymError("bad_frame", { message: `${field}: ${message}` }, field);
}

/**
 * The episodes as records, after checking what the schema cannot: all of the rollout's episodes
 * in env-id order, each of its group's tag and seed. Null fields left out are null again.
 */
function checkedEpisodes(episodes: readonly PlayedEpisode[], request: BatchRequest): EpisodeRecord[] {
  const tags = groupTags(request);
  const size = request.groupSize;
  if (episodes.length !== tags.length * size)
    throw refuse(
      "played_episodes",
      `got ${episodes.length} episodes; the request's ${tags.length} groups × group_size ${size} make ${tags.length * size}`,
    );
  episodes.forEach((e, i) => {
    const group = Math.floor(i / size);
    const expect = (name: keyof PlayedEpisode, ok: boolean, allowed: string) => {
      if (!ok)
        throw refuse(`played_episodes[${i}].${name}`, `got ${JSON.stringify(e[name])}, expected ${allowed}`);
    };
    expect("env_id", e.env_id === i, `${i} (episodes in env-id order)`);
    expect("group_id", e.group_id === group, `${group}`);
    expect("tag", e.tag === tags[group], JSON.stringify(tags[group]));
    expect("seed", e.seed === request.seed + group, `${request.seed + group} (the rollout's seed + group)`);
  });
  return episodes.map((e) => {
    const tokens = e.tokens && { ...e.tokens, template_drift: e.tokens.template_drift ?? null };
    return { ...e, failure: e.failure ?? null, ...(tokens ? { tokens } : {}) } as unknown as EpisodeRecord;
  });
}
