// Built-in policies that need no model: `oracle` answers with the env's own solver, `random`
// with uniformly random valid actions; both in RAGEN's <think>…</think><answer>…</answer> format.
// Noise knobs turn some answers random or malformed, so filters and failure paths get exercised.
import seedrandom from "seedrandom";
import type { ResolvedTag } from "../../envs/registry.ts";
import { type Policy, PolicyError, type PolicyRequest, type PolicyResponse } from "./policy.ts";
import { turnSlot } from "./slices.ts";
import { VersionBook } from "./version-book.ts";
import type { WeightUpdates } from "./versions.ts";

export interface BuiltinPolicyOptions {
  /** Probability that an answer is random valid actions instead of the plan. */
  noise?: number;
  /** Probability that an answer breaks the format (no closing tag or an unknown action). */
  malformed?: number;
}

type Choose = (request: PolicyRequest, rng: () => number) => { thought: string; actions: string[] };

/** What the random policy can play instead of an env without an action list. */
const RANDOM_ALLOWED =
  "allowed: a model (--llm URL --model M), or action names for the tag (env_config.actions, or an observation field named by env_config.actions_field)";

function randomActions(request: PolicyRequest, rng: () => number): string[] {
  const names = request.episode.actionNames;
  // A free-text env has no list to draw from; an empty answer would pass for a policy's choice.
  if (names.length === 0)
    throw new PolicyError(
      `the random policy draws its actions from the env's action list, and ${request.episode.tag} takes free text (its observation lists no actions); ${RANDOM_ALLOWED}`,
    );
  const count = Math.max(1, request.episode.actionsThisTurn);
  return Array.from({ length: count }, () => names[Math.floor(rng() * names.length)]);
}

const chooseRandom: Choose = (request, rng) => ({
  thought: "I will try some moves.",
  actions: randomActions(request, rng),
});

const chooseOracle: Choose = (request, rng) => {
  const plan = request.episode.solve();
  if (!plan || plan.length === 0)
    return { thought: "I do not see a plan; trying moves.", actions: randomActions(request, rng) };
  return {
    thought: `Following the plan ${plan.join(", ")}.`,
    actions: plan.slice(0, Math.max(1, request.episode.actionsThisTurn)),
  };
};

function format(
  request: PolicyRequest,
  thought: string,
  actions: readonly string[],
  broken: boolean,
): string {
  const sep = ` ${request.episode.actionSep ?? "||"} `;
  const answer = actions.join(sep);
  // The prefill ("<think>" or "<answer>") is part of the prompt, so the text continues after it.
  const body = request.episode.think ? `${thought}</think><answer>${answer}</answer>` : `${answer}</answer>`;
  if (!broken) return body;
  return request.episode.think
    ? `${thought}</think><answer>${answer}`
    : `Jump${answer ? `${sep}${answer}` : ""}</answer>`;
}

class BuiltinPolicy implements Policy {
  readonly name: string;
  private readonly choose: Choose;
  private readonly noise: number;
  private readonly malformed: number;
  /** No engine to pause: versions, and turns held while an update is open, so servers test without one. */
  private readonly book = new VersionBook();

  constructor(name: string, choose: Choose, options: BuiltinPolicyOptions) {
    this.name = name;
    this.choose = choose;
    this.noise = options.noise ?? 0;
    this.malformed = options.malformed ?? 0;
  }

  cannotPlay(tags: readonly ResolvedTag[]): string | null {
    if (this.choose !== chooseOracle) return null;
    // Without a solver the oracle would only play random moves under the name "oracle".
    const missing = tags.filter((t) => !t.type.solve);
    if (missing.length === 0) return null;
    const names = (of: (t: ResolvedTag) => string) => [...new Set(missing.map(of))].join(", ");
    return (
      `the oracle policy plays each env's own solver, and ${names((t) => t.spec.tag)} ` +
      `(env type ${names((t) => t.type.name)}) has none; allowed: --policy random ` +
      "(rollgym.policy.name=random), a model (--llm URL --model M), or a solve() in the env type"
    );
  }

  updates(): WeightUpdates {
    return this.book;
  }

  async generate(request: PolicyRequest): Promise<PolicyResponse> {
    // No I/O here: without a slot a batch would play on in microtasks and never let the loop
    // turn. An update that began meanwhile holds the turn; only an open one costs an await, so
    // a batch's turn order stays as it was without updates.
    for (;;) {
      const held = this.book.admit(request.signal);
      if (held) await held;
      this.book.inFlight++;
      try {
        await turnSlot();
      } finally {
        this.book.inFlight--;
      }
      if (!this.book.updating) break;
    }
    const dispatch = this.book.current.ordinal;
    // Seeded by the request seed, so a batch replays identically.
    const rng = seedrandom(`${this.name}:${request.sampling.seed}`);
    const noisy = rng() < this.noise;
    const broken = rng() < this.malformed;
    const { thought, actions } = noisy ? chooseRandom(request, rng) : this.choose(request, rng);
    return {
      text: format(request, thought, actions, broken),
      finishReason: "stop",
      attempts: 1,
      versions: this.book.stamp(dispatch),
    };
  }
}

export function oraclePolicy(options: BuiltinPolicyOptions = {}): Policy {
  return new BuiltinPolicy("oracle", chooseOracle, options);
}

export function randomPolicy(options: BuiltinPolicyOptions = {}): Policy {
  return new BuiltinPolicy("random", chooseRandom, options);
}

/**
 * The oracle on a two-armed bandit, pulling its arm (the high-risk one) in exactly `highShare`
 * of the episodes and the other arm in the rest: episode `env_id` pulls the high arm when
 * ⌊(env_id + 1)·share⌋ > ⌊env_id·share⌋, so any prefix of a batch has the mix to within one
 * episode (SFT data that leaves RL something to learn).
 */
export function armMixPolicy(highShare: number): Policy {
  if (!(highShare >= 0 && highShare <= 1)) throw new RangeError(`arm mix ${highShare} is not in [0, 1]`);
  const choose: Choose = (request) => {
    const { envId, actionNames } = request.episode;
    const high = request.episode.solve()?.[0];
    if (high === undefined || actionNames.length !== 2)
      throw new RangeError(
        `the arm mix needs a two-armed bandit, not an env with actions ${actionNames.join(", ")}`,
      );
    const pullsHigh = Math.floor((envId + 1) * highShare) > Math.floor(envId * highShare);
    const arm = pullsHigh ? high : (actionNames.find((name) => name !== high) as string);
    return { thought: `Pulling ${arm}.`, actions: [arm] };
  };
  return new BuiltinPolicy("arm-mix", choose, {});
}
