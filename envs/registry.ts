// Env types and tags by name. A tag is RAGEN's `custom_envs` entry: an env type, its config,
// the action budget and the instruction text. Users add their own types and tags here.
import type { Env, EnvType, Solution } from "./types.ts";
import { EnvConfigError } from "./types.ts";

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
  make(): Env;
  solve(env: Env): Solution | null;
}

export class UnknownTagError extends Error {
  readonly tag: string;
  constructor(tag: string, known: readonly string[]) {
    super(`unknown tag ${JSON.stringify(tag)}; known tags: ${known.join(", ")}`);
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
      make: () => type.create(config),
      solve: (env) => (type.solve ? type.solve(env, spec.max_actions_per_traj) : null),
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
