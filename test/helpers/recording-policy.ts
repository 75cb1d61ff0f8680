// A policy wrapper that records every request a rollout sends and the engine's answer, so
// tests can check what reached the engine (prompt shape, max_tokens, counted vs. reported tokens).

import type { ChatMessage, SamplingParams } from "../../src/llm/chat.ts";
import type { Policy, PolicyRequest, PolicyResponse, PromptMeter } from "../../src/llm/policy.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

/** One request outside any episode: a user line, RAGEN's default sampling, `sampling` on top. */
export function singleRequest(content: string, sampling: Partial<SamplingParams> = {}): PolicyRequest {
  return {
    messages: [{ role: "user", content }],
    prefill: "<think>",
    sampling: { ...defaultBatchRequest("train").sampling, seed: 7, ...sampling },
    episode: {
      tag: "SimpleSokoban",
      envId: 0,
      turn: 0,
      actionNames: ["Up"],
      actionsThisTurn: 1,
      think: true,
      solve: () => null,
    },
  };
}

export interface RecordedRequest {
  messages: readonly ChatMessage[];
  maxTokens: number;
  /** The meter's count for these messages (undefined without a meter). */
  counted?: number;
  /** What the engine reported as the prompt's token count. */
  promptTokens?: number;
  affinity?: string;
}

export function recordingPolicy(policy: Policy): { policy: Policy; requests: RecordedRequest[] } {
  const requests: RecordedRequest[] = [];
  const counts = new Map<string, number>();
  const key = (messages: readonly ChatMessage[], prefill: string) => JSON.stringify([messages, prefill]);
  const inner = policy.meter;
  const meter: PromptMeter | null = inner
    ? {
        limit: inner.limit,
        async count(messages, prefill, signal) {
          const n = await inner.count(messages, prefill, signal);
          counts.set(key(messages, prefill), n);
          return n;
        },
      }
    : null;
  const wrapped: Policy = {
    name: policy.name,
    meter,
    forget: policy.forget?.bind(policy),
    async generate(request: PolicyRequest): Promise<PolicyResponse> {
      const response = await policy.generate(request);
      requests.push({
        messages: request.messages,
        maxTokens: request.sampling.max_tokens,
        counted: counts.get(key(request.messages, request.prefill)),
        promptTokens: response.promptTokens,
        affinity: request.affinity,
      });
      return response;
    },
  };
  return { policy: wrapped, requests };
}

/**
 * Problems with the shape of a "turns"-mode prompt: after the system message, every state
 * block shown is followed by its response and reward, except the current one, and the turn
 * numbers shown are consecutive and end with the current turn.
 */
export function promptShapeProblems(messages: readonly ChatMessage[]): string[] {
  const problems: string[] = [];
  if (messages[0]?.role !== "system") problems.push("the first message is not the system prompt");
  const rest = messages.slice(1);
  const turns: number[] = [];
  rest.forEach((m, i) => {
    const expected = i % 2 === 0 ? "user" : "assistant";
    if (m.role !== expected) problems.push(`message ${i + 1} is ${m.role}, expected ${expected}`);
    if (m.role !== "user") return;
    const shown = [...m.content.matchAll(/^Turn (\d+):$/gm)].map((match) => Number(match[1]));
    if (shown.length !== 1) problems.push(`user message ${i + 1} shows ${shown.length} states, expected 1`);
    turns.push(...shown);
    if (i > 0 && !m.content.startsWith("Reward:\n")) problems.push(`user message ${i + 1} lacks its reward`);
  });
  if (rest[rest.length - 1]?.role !== "user") problems.push("the prompt does not end with the current state");
  turns.forEach((t, i) => {
    if (i > 0 && t !== turns[i - 1] + 1) problems.push(`turns shown are not consecutive: ${turns.join(",")}`);
  });
  return problems;
}
