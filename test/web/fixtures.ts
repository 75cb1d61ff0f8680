// An episode file as `rollgym rollout --out` writes it, played by the random policy.
import { createRegistry } from "../../envs/catalog.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { writeEpisodeFile } from "../../src/record/episode-file.ts";
import type { BatchResult } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

async function played(
  tags: { tag: string; groups: number }[],
  groupSize: number,
  policy: Policy = randomPolicy(),
  overrides: Partial<BatchRequest> = {},
) {
  const request = defaultBatchRequest("train", { tags, groupSize, ...overrides });
  const batch = await runBatch(createRegistry(), request, policy);
  const header = {
    mode: "train",
    seed: request.seed,
    group_size: groupSize,
    tags,
    policy: policy.name,
    settings: {},
  };
  return { batch, header };
}

/** `policy` (default: random) plays the tags; `overrides` change the request (seed …). */
export async function writeEpisodes(
  path: string,
  tags: { tag: string; groups: number }[],
  groupSize: number,
  policy?: Policy,
  overrides?: Partial<BatchRequest>,
): Promise<BatchResult> {
  const { batch, header } = await played(tags, groupSize, policy, overrides);
  await writeEpisodeFile(path, header, batch);
  return batch;
}

/**
 * An episode file as an interrupted rollout (Ctrl-C) writes it: the first `finished` episodes
 * by env id, only the groups they complete, and the signal in the summary.
 */
export async function writeInterruptedEpisodes(
  path: string,
  tags: { tag: string; groups: number }[],
  groupSize: number,
  finished: number,
): Promise<BatchResult> {
  const { batch: full, header } = await played(tags, groupSize);
  const episodes = [...full.episodes].sort((a, b) => a.env_id - b.env_id).slice(0, finished);
  const done = new Set(episodes.map((e) => e.env_id));
  const groups = full.groups.filter((g) => g.env_ids.every((id) => done.has(id)));
  const batch = { ...full, episodes, groups };
  await writeEpisodeFile(path, header, batch, { interrupted: "SIGINT" });
  return batch;
}
