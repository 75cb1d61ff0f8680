// Play for the web page: a seed and the actions so far in, the whole trajectory out. Stateless
// (undo, reset and shared URLs are just shorter or other action lists), so the server keeps
// nothing per player and the only limit needed is the tag's own action budget. The env's rules
// are its wrappers' (envs/wrappers); this file words their refusals for the page.
import { type EnvRegistry, type ResolvedTag, unknownTagMessage } from "../../../envs/registry.ts";
import type { Env, StepResult } from "../../../envs/types.ts";
import { ActionBudget } from "../../../envs/wrappers/action-budget.ts";
import { EpisodeStatistics } from "../../../envs/wrappers/episode-statistics.ts";
import { EnvRuleError } from "../../../envs/wrappers/wrapper.ts";
import { RollgymError } from "../../errors/catalogue.ts";
import type { ChatMessage } from "../../llm/chat.ts";
import { systemPrompt, turnBlock } from "../../rollout/prompt.ts";

export interface PlayRequest {
  tag: string;
  seed: number;
  actions: readonly string[];
  /** Also return a shortest solution from the last state. */
  solve: boolean;
}

export interface PlayStep {
  action: string;
  reward: number;
  done: boolean;
  success: boolean;
  effective: boolean;
}

export interface PlayResult {
  tag: string;
  env_type: string;
  seed: number;
  action_names: readonly string[];
  budget: number;
  /** Observation before any action, then after each step. */
  states: string[];
  steps: PlayStep[];
  reward: number;
  done: boolean;
  success: boolean;
  /** Why the episode ended: the env ended it, or the action budget ran out. */
  end_reason: "done" | "action_budget" | null;
  /** What the model would read for the last state: the system prompt and that turn's block. */
  messages: ChatMessage[];
  solution?: string[] | null;
  success_probability?: number;
}

export function play(
  registry: EnvRegistry,
  request: PlayRequest,
  prompt: { think: boolean; actionSep: string },
): PlayResult {
  if (!registry.hasTag(request.tag))
    throw new RollgymError(
      "unknown_tag",
      { message: unknownTagMessage(request.tag, registry.tagNames()) },
      "tag",
    );
  const tag: ResolvedTag = registry.tag(request.tag);
  if (tag.type.open)
    throw new RollgymError(
      "bad_request",
      {
        message: `${request.tag} runs in another process (env_type ${tag.spec.env_type}); the page plays in-process tags`,
      },
      "tag",
    );
  const budget = new ActionBudget(tag.make(), tag.spec.max_actions_per_traj);
  // The whole list is refused up front, before any of its names is looked at.
  if (request.actions.length > budget.actionsLeft)
    throw new RollgymError(
      "bad_request",
      { message: `${request.actions.length} actions exceed ${request.tag}'s budget of ${budget.maxActions}` },
      "actions",
    );
  const env = new EpisodeStatistics(budget);
  const states = [env.reset(request.seed)];
  const steps: PlayStep[] = [];
  for (const [i, name] of request.actions.entries()) {
    const result = stepOrRefuse(env, i, name);
    states.push(result.observation);
    steps.push({
      action: name,
      reward: result.reward,
      done: result.terminated || result.truncated,
      success: result.info.success,
      effective: result.info.action_is_effective,
    });
  }
  const out: PlayResult = {
    tag: request.tag,
    env_type: tag.spec.env_type,
    seed: request.seed,
    action_names: env.actionNames,
    budget: budget.maxActions,
    states,
    steps,
    reward: env.episodeReturn,
    done: env.done,
    success: steps.at(-1)?.success ?? false,
    end_reason: budget.endedByBudget ? "action_budget" : env.done ? "done" : null,
    messages: [
      { role: "system", content: systemPrompt(tag, prompt) },
      {
        role: "user",
        content: turnBlock({
          turn: 1,
          state: states.at(-1)!,
          actionsLeft: budget.actionsLeft,
          maxTokens: tag.spec.max_tokens,
          think: prompt.think,
        }),
      },
    ],
  };
  if (request.solve && !out.done) {
    const solution = tag.solve(env);
    out.solution = solution?.actions ?? null;
    if (solution?.successProbability !== undefined) out.success_probability = solution.successProbability;
  }
  return out;
}

/** Steps the `i`-th action, `name`; an action the env's rules refuse is a bad request naming it. */
function stepOrRefuse(env: EpisodeStatistics<ActionBudget<Env>>, i: number, name: string): StepResult {
  try {
    return env.step(env.actionNames.indexOf(name) + 1);
  } catch (error) {
    if (!(error instanceof EnvRuleError)) throw error;
    const message =
      error.rule === "episode_done"
        ? `the episode ended after action ${i}; ${name} cannot follow`
        : error.rule === "not_an_action"
          ? `unknown action ${JSON.stringify(name)}; allowed: ${env.actionNames.join(", ")}`
          : error.message;
    throw new RollgymError("bad_request", { message }, "actions");
  }
}
