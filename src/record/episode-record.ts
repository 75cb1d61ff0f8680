// The shape of a played batch as episode files, group frames and the page carry it: episodes
// with their turns and token logs, groups with the filter's verdict. Rollouts fill it; the
// episode-file writer and reader, the server and the CLI read it.
import type { Mode } from "../../protocol/settings.ts";

export type RolloutMode = Mode;

/** Why an episode stopped taking turns. */
export type EndReason = "done" | "action_budget" | "max_turn" | "context_full" | "failed";

/** One model turn, as recorded in episode files and sent to trainers. */
export interface TurnRecord {
  turn: number;
  /** The observation the model saw this turn. */
  state: string;
  actions_left: number;
  /** The prompt carried RAGEN's "No valid action provided previously…" warning. */
  warned: boolean;
  /** Prefill + generated text, exactly as the model produced it. */
  raw_response: string;
  /** RAGEN's rebuilt response, which later prompts show. */
  response: string;
  parsed: string[];
  /** Names of the actions executed, in order. */
  actions: string[];
  reward: number;
  /** The reward as Python prints it in the next prompt ("-0.1", "0", "10.8"). */
  reward_text: string;
  format_penalty: boolean;
  info: Record<string, number | boolean>;
  finish_reason: string;
  prompt_tokens?: number;
  completion_tokens?: number;
  /** Prompt tokens the engine reused from its prefix cache, when it reports it (llama.cpp). */
  cached_tokens?: number;
  /** Earlier turns left out of this turn's prompt to fit the engine's context (only when > 0). */
  context_dropped?: number;
  /** The engine's reasoning/content split could not be undone exactly (see docs/rollouts.md). */
  ambiguous_split?: true;
  /** Weight version ordinals at dispatch and completion; they differ when an update fell inside the turn. */
  version?: { dispatch: number; completion: number };
}

export interface EpisodeRecord {
  env_id: number;
  group_id: number;
  tag: string;
  seed: number;
  turns: TurnRecord[];
  /** The state after the last turn. */
  final_state: string;
  num_actions: number;
  terminated: boolean;
  truncated: boolean;
  success: boolean;
  /** Sum of turn rewards (as doubles). */
  reward: number;
  /** Sum of format penalties. */
  penalty: number;
  /** RAGEN's trajectory score: float32(reward) + float32(penalty). */
  score: number;
  /** RAGEN's per-episode metrics, keyed "<tag>/<name>". */
  metrics: Record<string, number>;
  /** Set when the episode could not be played to its end (e.g. inference failed for good). */
  failure: string | null;
  /** Why it stopped: the env ended it, the action budget, max_turn, the context window, or a failure. */
  end_reason: EndReason;
  /** The exact token log, in token mode. */
  tokens?: TokenRecord;
}

/** The log as episode files and group frames carry it. */
export interface TokenRecord {
  ids: number[];
  /** 1 at sampled ids, 0 at prompt and inserted ids. */
  loss_mask: number[];
  /**
   * The engine's logprob of each sampled id; 0 elsewhere. NaN (null in JSON files) at a sampled
   * id whose logprob the engine did not report (llama.cpp leaves out tokens that end inside a
   * UTF-8 character): never made up. `loss_mask` & finite(`logprobs`) is the mask of known ones.
   */
  logprobs: number[];
  /** Each turn's reward on the turn's last sampled id; 0 elsewhere. */
  rewards: number[];
  /** [turn_starts[k], turn_ends[k]) holds turn k's sampled ids. */
  turn_starts: number[];
  turn_ends: number[];
  /** Length of the first prompt. */
  prompt_length: number;
  /** Sampled ids whose logprob the engine did not report (NaN in `logprobs`). */
  logprobs_missing: number;
  /** Requests whose prompt, as the engine echoed it, was not the log so far (expected 0). */
  prompt_drift: number;
  /**
   * Where the decoded log first differs from the chat template's rendering of the same
   * conversation (a character offset), or null when the log is that rendering.
   */
  template_drift: number | null;
  /** Present (false) when the engine could not render the conversation for the drift check. */
  template_checked?: false;
  /**
   * Present (true) when the drift check did not run because earlier episodes on this engine
   * had verified the template append-only (docs/rollouts.md, "Token mode"): `template_drift` is
   * then null, the log being the template's rendering by the same construction they verified.
   */
  template_skipped?: true;
  /**
   * Continuations (the ids inserted between turns) tokenized from the block after the assistant
   * turn alone, and rendered from the whole conversation (a replica's verification, a spot check,
   * or the fallback). Absent when none was counted: a one-turn episode, an env session's log,
   * a file written before id-space continuations.
   */
  id_space_continuations?: number;
  rendered_continuations?: number;
  /**
   * Why continuations of this episode rendered the whole conversation when not verifying: the
   * template rewrites what follows an assistant turn, or trims a user message with edge whitespace.
   */
  continuation_fallback?: string;
  /**
   * The weight version ordinal that sampled each id, aligned with `ids` (-1 at prompt and
   * inserted ids); present once the trainer has versions (issue #22).
   */
  versions?: number[];
}

export interface GroupResult {
  group_id: number;
  tag: string;
  seed: number;
  env_ids: number[];
  /** The filter's score for the group (null when the group had a failed episode). */
  score: number | null;
  kept: boolean;
  failed: boolean;
}

export interface BatchResult {
  mode: RolloutMode;
  seed: number;
  episodes: EpisodeRecord[];
  groups: GroupResult[];
  /** RAGEN-named metrics: "<train|val-env>/<tag>/<name>" plus the filter's "rollout/…". */
  metrics: Record<string, number>;
  failed: number;
  /** Groups a cancellation stopped before they started: no episode was built (they are in `groups` as failed). */
  notStarted: number[];
}
