// Play for the web page: a seed and the actions so far in, the whole trajectory out. Stateless
// (undo, reset and shared URLs are just shorter or other action lists), so the server keeps
// nothing per player and the only limit needed is the tag's own action budget.
import { type EnvRegistry, type ResolvedTag, unknownTagMessage } from "../../../envs/registry.ts";
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
  const budget = tag.spec.max_actions_per_traj;
  if (request.actions.length > budget)
    throw new RollgymError(
      "bad_request",
      { message: `${request.actions.length} actions exceed ${request.tag}'s budget of ${budget}` },
      "actions",
    );
  const env = tag.make();
  const states = [env.reset(request.seed)];
  const steps: PlayStep[] = [];
  let reward = 0;
  let envDone = false;
  for (const [i, name] of request.actions.entries()) {
    if (envDone)
      throw new RollgymError(
        "bad_request",
        { message: `the episode ended after action ${i}; ${name} cannot follow` },
        "actions",
      );
    const id = env.actionNames.indexOf(name) + 1;
    if (id === 0)
      throw new RollgymError(
        "bad_request",
        { message: `unknown action ${JSON.stringify(name)}; allowed: ${env.actionNames.join(", ")}` },
        "actions",
      );
    const result = env.step(id);
    envDone = result.terminated || result.truncated;
    reward += result.reward;
    states.push(result.observation);
    steps.push({
      action: name,
      reward: result.reward,
      done: envDone,
      success: result.info.success,
      effective: result.info.action_is_effective,
    });
  }
  const budgetSpent = !envDone && steps.length >= budget;
  const out: PlayResult = {
    tag: request.tag,
    env_type: tag.spec.env_type,
    seed: request.seed,
    action_names: env.actionNames,
    budget,
    states,
    steps,
    reward,
    done: envDone || budgetSpent,
    success: steps.at(-1)?.success ?? false,
    end_reason: envDone ? "done" : budgetSpent ? "action_budget" : null,
    messages: [
      { role: "system", content: systemPrompt(tag, prompt) },
      {
        role: "user",
        content: turnBlock({
          turn: 1,
          state: states.at(-1)!,
          actionsLeft: budget - steps.length,
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
