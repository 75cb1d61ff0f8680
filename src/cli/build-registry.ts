// Which env types and tags a run has: the composition, above configuration. RAGEN's catalogue,
// the remote OpenEnv type, then what the configuration adds (its plugins and options.plugins,
// then custom_envs; src/config/registry.ts).
import { createRegistry } from "../../envs/catalog.ts";
import type { EnvRegistry } from "../../envs/registry.ts";
import { applyCustomEnvs, configPlugins, loadPlugins, type PluginRef } from "../config/registry.ts";
import type { RollgymConfig } from "../config/schema.ts";
import { openenv } from "../remote-envs/openenv-remote.ts";

export interface RegistryOptions {
  /** LoadedConfig.origins, so errors can say where a key was set. */
  origins?: Readonly<Record<string, string>>;
  /** LoadedConfig.dirs: a rollgym.plugins set in a file names paths from the file's directory. */
  dirs?: Readonly<Record<string, string>>;
  /** Plugins beyond config.rollgym.plugins (e.g. from --plugin). */
  plugins?: readonly PluginRef[];
  /** Where relative plugin paths not from a config file start (default: the current directory). */
  cwd?: string;
  /** Receives a line per custom_envs entry skipped (unusable, and no mode plays its tag). */
  notices?: string[];
}

/** RAGEN's tags, then the plugins (config's rollgym.plugins and options.plugins), then custom_envs. */
export async function buildRegistry(
  config: RollgymConfig,
  options: RegistryOptions = {},
): Promise<EnvRegistry> {
  const origins = options.origins ?? {};
  const registry = createRegistry();
  // Remote envs are a type like the in-process ones: custom_envs.X.env_type: openenv.
  registry.registerType(openenv);
  const plugins = [...configPlugins(config, origins, options.dirs), ...(options.plugins ?? [])];
  await loadPlugins(registry, plugins, options.cwd);
  applyCustomEnvs(registry, config, origins, options.notices ?? null);
  return registry;
}
