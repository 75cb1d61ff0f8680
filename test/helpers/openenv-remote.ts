// Registries with a tag hosted remotely (env_type openenv), built as a user's custom_envs entry.
import type { EnvRegistry } from "../../envs/registry.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { applyCustomEnvs, buildRegistry } from "../../src/config/registry.ts";

/**
 * The default registry plus `tag`: env_type openenv with `envConfig`, and the action budget,
 * instruction and max_tokens of the in-process tag `like`.
 */
export async function remoteRegistry(
  tag: string,
  like: string,
  envConfig: Record<string, unknown>,
): Promise<EnvRegistry> {
  const config = defaultConfig();
  const registry = await buildRegistry(config);
  const spec = registry.tag(like).spec;
  config.custom_envs = {
    [tag]: {
      env_type: "openenv",
      max_actions_per_traj: spec.max_actions_per_traj,
      env_instruction: spec.env_instruction,
      max_tokens: spec.max_tokens,
      env_config: envConfig,
    },
  } as never;
  applyCustomEnvs(registry, config);
  return registry;
}
