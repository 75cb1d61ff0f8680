// What a policy is asked for a turn with: the chat so far and the sampling parameters. Rollouts
// build them, every policy and engine client takes them.

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface SamplingParams {
  temperature: number;
  top_p: number;
  /** -1 disables (vLLM). */
  top_k: number;
  min_p: number;
  /** Sent explicitly, so a server's generation-config defaults never change the policy (RAGEN: 1, 0, 0). */
  repetition_penalty: number;
  presence_penalty: number;
  frequency_penalty: number;
  max_tokens: number;
  /** Per-request seed derived from (batch seed, env id, turn), so deterministic engines reproduce. */
  seed: number;
  stop?: string[];
}
