// What a policy is asked for a turn with: the chat so far and the sampling parameters. Rollouts
// build them, every policy and engine client takes them.
import type { SamplingValues } from "../../protocol/settings.ts";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** One request's sampling: the settings (protocol/settings.ts SAMPLING), a seed and stop strings. */
export type SamplingParams = SamplingValues & {
  /** Per-request seed derived from (batch seed, env id, turn), so deterministic engines reproduce. */
  seed: number;
  stop?: string[];
};
