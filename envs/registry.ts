// Env types and tags by name. A tag is RAGEN's `custom_envs` entry: an env type, its config,
// the action budget and the instruction text. Users add their own types and tags here.
import type { AsyncEnv, ChargeBytes, Env, EnvType, Solution } from "./types.ts";
import { EnvConfigError } from "./types.ts";
import { OrderEnforcing } from "./wrappers/order-enforcing.ts";
import { unwrap } from "./wrappers/wrapper.ts";

/** One entry of RAGEN's config/envs.yaml `custom_envs`. */
export interface TagSpec {
  tag: string;
  env_type: string;
  /** Action budget per episode, enforced by the rollout, not the env. */
  max_actions_per_traj: number;
  /** Appended to the system prompt. */
  env_instruction: string;
  /** Only printed in the prompt ("Max response length: N words (tokens)."), never enforced. */
  max_tokens: number;
  parallel_friendly?: boolean;
  max_workers?: number;
  env_config: Record<string, unknown> | null;
}

/** A tag with its env type looked up and its config resolved against the type's defaults. */
export interface ResolvedTag {
  readonly spec: TagSpec;
  readonly type: EnvType<object>;
  readonly config: object;
  /**
   * The env stepped in process (envs play, the web page), in an OrderEnforcing as Gymnasium's
   * `make` puts it; throws EnvUsageError for a remote type.
   */
  make(): Env;
  /**
   * The env a rollout plays, in an OrderEnforcing: in process, or in another process answering
   * through promises (whose answers' bytes go to `charge` as they arrive).
   */
  open(charge?: ChargeBytes): AsyncEnv;
  /** The episode solved by the type's solver, or null when the type has none. */
  solve(env: AsyncEnv): Solution | null;
}

/** Edits (insert, delete, substitute) between `a` and `b`, case ignored. */
function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let row = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const next = [i];
    for (let j = 1; j <= y.length; j++)
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (x[i - 1] === y[j - 1] ? 0 : 1));
    row = next;
  }
  return row[y.length];
}

/** The known name a typo most likely meant (within a third of its length in edits), or null. */
export function closestName(word: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1;
  for (const name of known) {
    const distance = editDistance(word, name);
    if (distance < bestDistance) [best, bestDistance] = [name, distance];
  }
  return best;
}

/** "unknown tag "X" (did you mean "Y"?); known tags: …", the one wording every caller uses. */
export function unknownTagMessage(tag: string, known: readonly string[]): string {
  const guess = closestName(tag, known);
  return (
    `unknown tag ${JSON.stringify(tag)}${guess ? ` (did you mean ${JSON.stringify(guess)}?)` : ""}; ` +
    `known tags: ${known.join(", ")}`
  );
}

export class UnknownTagError extends Error {
  readonly tag: string;
  constructor(tag: string, known: readonly string[]) {
    super(unknownTagMessage(tag, known));
    this.name = "UnknownTagError";
    this.tag = tag;
  }
}

export class EnvRegistry {
  private readonly types = new Map<string, EnvType<object>>();
  private readonly tags = new Map<string, ResolvedTag>();

  registerType<C extends object>(type: EnvType<C>): void {
    if (this.types.has(type.name)) throw new Error(`env type ${type.name} is already registered`);
    this.types.set(type.name, type as unknown as EnvType<object>);
  }

  /** Validates the tag's config now, so a bad tag fails at registration, not at first use. */
  registerTag(spec: TagSpec): ResolvedTag {
    const type = this.types.get(spec.env_type);
    if (!type) {
      throw new EnvConfigError(
        "env_type",
        `${JSON.stringify(spec.env_type)} is not a registered env type (${[...this.types.keys()].join(", ")})`,
      );
    }
    if (!Number.isInteger(spec.max_actions_per_traj) || spec.max_actions_per_traj < 1) {
      throw new EnvConfigError(
        "max_actions_per_traj",
        `${spec.max_actions_per_traj} is not a positive integer`,
      );
    }
    const config = type.resolveConfig(spec.env_config ?? {});
    const resolved: ResolvedTag = {
      spec,
      type,
      config,
      make: () => new OrderEnforcing(type.create(config)),
      open: (charge) => new OrderEnforcing(type.open ? type.open(config, charge) : type.create(config)),
      // Only in-process types have solvers, and their envs are the ones `open` made.
      solve: (env) => (type.solve ? type.solve(unwrap(env) as Env, spec.max_actions_per_traj) : null),
    };
    this.tags.set(spec.tag, resolved);
    return resolved;
  }

  tag(name: string): ResolvedTag {
    const found = this.tags.get(name);
    if (!found) throw new UnknownTagError(name, this.tagNames());
    return found;
  }

  hasTag(name: string): boolean {
    return this.tags.has(name);
  }

  tagNames(): string[] {
    return [...this.tags.keys()];
  }

  envType(name: string): EnvType<object> | undefined {
    return this.types.get(name);
  }
}
