// What every command that touches envs shares: config files, key=value overrides, plugins and
// the env registry they describe. Problems become one-line usage errors; notices are held back
// until every input has been checked, so a bad input still prints exactly one line.
import type { EnvRegistry } from "../../envs/registry.ts";
import { ConfigError, type LoadedConfig, loadConfig } from "../config/index.ts";
import { buildRegistry } from "../config/registry.ts";
import { type FlagSpec, type ParsedArgs, UsageError } from "./args.ts";
import { say } from "./io.ts";

export const CONFIG_FLAGS: Record<string, FlagSpec> = {
  config: {
    kind: "value",
    arg: "FILE",
    repeat: true,
    help: "a YAML config file (RAGEN key names); later files win, key=value wins over files",
  },
  plugin: {
    kind: "value",
    arg: "MODULE",
    repeat: true,
    help: "a module (path or package) whose register(registry) adds env types and tags",
  },
};

/** A positional that is a config override: key=value, +key=value, ++key=value or ~key. */
export function isOverride(text: string): boolean {
  return text.includes("=") || text.startsWith("~");
}

export function loadOrExplain(files: readonly string[], overrides: readonly string[]): LoadedConfig {
  try {
    return loadConfig({ files, overrides });
  } catch (error) {
    if (error instanceof ConfigError) throw new UsageError(error.message);
    throw error;
  }
}

/** Trainer-only keys and notices, printed once the command is sure to run. */
export function reportLoaded(loaded: LoadedConfig): void {
  for (const key of loaded.ignored) say(`ignoring trainer-only key ${key}`);
  for (const notice of loaded.notices) say(notice);
}

export interface Setup {
  loaded: LoadedConfig;
  registry: EnvRegistry;
}

/** The config (files, then `overrides`) and its registry (plugins, custom_envs). */
export async function setup(args: ParsedArgs, overrides: readonly string[]): Promise<Setup> {
  const loaded = loadOrExplain(args.lists.get("config") ?? [], overrides);
  try {
    const registry = await buildRegistry(loaded.config, {
      origins: loaded.origins,
      plugins: (args.lists.get("plugin") ?? []).map((module) => ({ module, from: "--plugin" })),
    });
    return { loaded, registry };
  } catch (error) {
    if (error instanceof ConfigError) throw new UsageError(error.message);
    throw error;
  }
}
