// An episode file as `rollgym rollout --out` writes it, played by the random policy.
import { createRegistry } from "../../envs/catalog.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import { writeEpisodeFile } from "../../src/record/episode-file.ts";
import { type BatchResult, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

export async function writeEpisodes(
  path: string,
  tags: { tag: string; groups: number }[],
  groupSize: number,
): Promise<BatchResult> {
  const request = defaultBatchRequest("train", { tags, groupSize });
  const batch = await runBatch(createRegistry(), request, randomPolicy());
  const header = {
    mode: "train",
    seed: request.seed,
    group_size: groupSize,
    tags,
    policy: "random",
    settings: {},
  };
  await writeEpisodeFile(path, header, batch);
  return batch;
}
