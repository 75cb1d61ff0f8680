// What every command that touches envs shares: config files, key=value overrides, plugins and
// the env registry they describe. Problems become one-line usage errors; notices are held back
// until every input has been checked, so a bad input still prints exactly one line.
import type { EnvRegistry } from "../../envs/registry.ts";
import { type LoadedConfig, loadConfig } from "../config/index.ts";
import type { FlagSpec, ParsedArgs } from "./args.ts";
import { buildRegistry } from "./build-registry.ts";
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

/** Trainer-only keys and notices, printed once the command is sure to run. */
export function reportLoaded(loaded: LoadedConfig): void {
  if (loaded.ignored.length > 0) say(ignoredSummary(loaded.ignored));
  for (const notice of loaded.notices) say(notice);
}

/**
 * One line for the trainer-only keys (RAGEN's base.yaml has some 80): each key when there are
 * a few, else the count under each top-level section.
 */
export function ignoredSummary(keys: readonly string[]): string {
  if (keys.length <= 3) return `ignoring trainer-only key${keys.length > 1 ? "s" : ""} ${keys.join(", ")}`;
  const sections = new Map<string, number>();
  for (const key of keys) {
    const section = key
      .split(".")
      .slice(0, key.startsWith("actor_rollout_ref.") ? 2 : 1)
      .join(".");
    sections.set(section, (sections.get(section) ?? 0) + 1);
  }
  const parts = [...sections].map(
    ([section, n]) => `${keys.includes(section) ? section : `${section}.*`} (${n})`,
  );
  return `ignoring ${keys.length} trainer-only keys: ${parts.join(", ")}`;
}

export interface Setup {
  loaded: LoadedConfig;
  registry: EnvRegistry;
}

/** The config (files, then `overrides`) and its registry (plugins, custom_envs). */
export async function setup(args: ParsedArgs, overrides: readonly string[]): Promise<Setup> {
  const loaded = loadConfig({ files: args.lists.get("config") ?? [], overrides });
  const registry = await buildRegistry(loaded.config, {
    origins: loaded.origins,
    dirs: loaded.dirs,
    plugins: (args.lists.get("plugin") ?? []).map((module) => ({ module, from: "--plugin" })),
    notices: loaded.notices,
  });
  return { loaded, registry };
}
