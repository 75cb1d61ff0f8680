// One batch against a remote engine, the way the CLI plays it: a chat policy checked at
// preflight, the batch, the policy closed.
import { createRegistry } from "../../envs/catalog.ts";
import { ChatPolicy, type ChatPolicyOptions } from "../../src/llm/openai-chat.ts";
import type { BatchResult } from "../../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

const registry = createRegistry();

export async function playAgainst(options: ChatPolicyOptions, request: BatchRequest): Promise<BatchResult> {
  const policy = new ChatPolicy(options);
  try {
    await policy.preflight();
    return await runBatch(registry, request, policy);
  } finally {
    await policy.close();
  }
}

/** A SimpleSokoban train batch of `groups` × `groupSize` with short answers, in chat or token mode. */
export function sokobanBatch(
  groups: number,
  groupSize: number,
  maxTokens: number,
  tokens: boolean,
): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups }], groupSize });
  return { ...base, tokens, sampling: { ...base.sampling, max_tokens: maxTokens } };
}
