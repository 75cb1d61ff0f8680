// What a configuration adds to an env registry: the env types and tags of plugin modules, and
// `custom_envs` entries merged into the tags they name (Hydra merges a partial
// `custom_envs.CoordFrozenLake.env_config.success_rate: 1` into envs.yaml's entry) or added as
// new tags. Errors are ConfigErrors naming the full dotted key and where it was set. Which env
// types exist to begin with is composition, above configuration (src/cli/build-registry.ts).
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { EnvRegistry, TagSpec } from "../../envs/registry.ts";
import { EnvConfigError } from "../../envs/types.ts";
import { isPlainObject } from "../../protocol/plain-object.ts";
import { originOf } from "./load.ts";
import { ConfigError, type CustomEnvEntry, formatValue, type RollgymConfig } from "./schema.ts";

/** What a plugin module exports as `register` (or as its default export). */
export type RegisterEnvs = (registry: EnvRegistry) => void | Promise<void>;

export interface PluginRef {
  /** A path (from `dir`, else the current directory) or a package name. */
  module: string;
  /** Where it was named, for errors: "--plugin" or "rollgym.plugins (set in run.yaml:3)". */
  from: string;
  /** The directory of the config file that named it: its relative path starts there. */
  dir?: string;
}

const TAG_FIELDS = ["env_type", "max_actions_per_traj", "env_instruction", "max_tokens"] as const;

/** OmegaConf merge: mappings key by key, anything else replaces; null replaces too. */
function mergeData(base: unknown, over: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(over)) return structuredClone(over);
  const out: Record<string, unknown> = structuredClone(base);
  for (const [key, value] of Object.entries(over)) out[key] = mergeData(out[key], value);
  return out;
}

/** A custom_envs entry merged into the tag it names, or a new tag when it names none. */
function mergeTagSpec(tag: string, base: TagSpec | undefined, entry: CustomEnvEntry): Partial<TagSpec> {
  const merged: Record<string, unknown> = base ? { ...structuredClone(base) } : { tag };
  for (const [field, value] of Object.entries(entry)) {
    merged[field] = field === "env_config" ? mergeData(merged.env_config, value) : value;
  }
  merged.tag = tag;
  return merged as Partial<TagSpec>;
}

function suffix(origins: Readonly<Record<string, string>>, key: string): string {
  const origin = originOf(origins, key);
  return origin === undefined ? "" : ` (set in ${origin})`;
}

/** Registers every custom_envs entry; throws ConfigError with the full key and its origin. */
export function applyCustomEnvs(
  registry: EnvRegistry,
  config: RollgymConfig,
  origins: Readonly<Record<string, string>> = {},
  notices: string[] | null = null,
): void {
  // RAGEN's envs.yaml defines tags rollgym cannot host (VisualSimpleSokoban renders images); a
  // pasted envs.yaml should load as long as no mode plays them, so such new tags are skipped.
  const played = new Set([
    ...config.es_manager.train.env_configs.tags,
    ...config.es_manager.val.env_configs.tags,
  ]);
  for (const [tag, entry] of Object.entries(config.custom_envs)) {
    // Only a whole new tag (envs.yaml's kind of entry) may be skipped: a change to a tag rollgym
    // has, or a new tag missing fields, is a mistake rather than a tag rollgym cannot host.
    const adds =
      !registry.hasTag(tag) && TAG_FIELDS.every((f) => (entry as Record<string, unknown>)[f] !== undefined);
    try {
      applyCustomEnv(registry, tag, entry, origins);
    } catch (error) {
      if (!(error instanceof ConfigError) || notices === null || played.has(tag) || !adds) throw error;
      const prefix = `custom_envs.${tag}`;
      notices.push(
        `skipping ${prefix}, which no mode plays: ${error.message} (drop the entry, or add the override ~${prefix}, to silence this)`,
      );
    }
  }
}

function applyCustomEnv(
  registry: EnvRegistry,
  tag: string,
  entry: CustomEnvEntry,
  origins: Readonly<Record<string, string>>,
): void {
  const prefix = `custom_envs.${tag}`;
  const base = registry.hasTag(tag) ? registry.tag(tag).spec : undefined;
  const spec = mergeTagSpec(tag, base, entry);
  const missing = TAG_FIELDS.filter((f) => spec[f] === undefined);
  if (missing.length > 0) {
    const key = `${prefix}.${missing[0]}`;
    throw new ConfigError(
      key,
      `${key} is not set, and ${tag} is a new tag (not one of ${registry.tagNames().join(", ")}), so ` +
        `${prefix} needs ${TAG_FIELDS.join(", ")}; missing: ${missing.join(", ")}${suffix(origins, prefix)}`,
    );
  }
  try {
    registry.registerTag(spec as TagSpec);
  } catch (error) {
    if (!(error instanceof EnvConfigError)) throw error;
    const field = error.field;
    const key = (TAG_FIELDS as readonly string[]).includes(field)
      ? `${prefix}.${field}`
      : `${prefix}.env_config.${field}`;
    const detail = error.message.startsWith(`${field}: `)
      ? error.message.slice(field.length + 2)
      : error.message;
    throw new ConfigError(key, `${key}: ${detail}${suffix(origins, key)}`);
  }
}

/** Imports each plugin module and calls its register(registry). */
export async function loadPlugins(
  registry: EnvRegistry,
  plugins: readonly PluginRef[],
  cwd = process.cwd(),
): Promise<void> {
  for (const plugin of plugins) {
    const base = plugin.dir ?? cwd;
    const fail = (why: string): never => {
      throw new ConfigError(
        plugin.from.startsWith("rollgym.plugins") ? "rollgym.plugins" : null,
        `${plugin.from}: ${formatValue(plugin.module)} ${why}; allowed: a module (a path from ` +
          `${plugin.dir === undefined ? "the current directory" : `the config file's directory, ${plugin.dir}`}, ` +
          "or a package name) exporting register(registry)",
      );
    };
    let exports: Record<string, unknown>;
    const commonJs = commonJsProblem(resolve(base, plugin.module));
    if (commonJs) return fail(commonJs);
    try {
      exports = await importPlugin(plugin.module, base);
    } catch (error) {
      return fail(`cannot be loaded: ${oneLine(error)}`);
    }
    const register = exports.register ?? exports.default;
    if (typeof register !== "function") return fail("exports no register(registry) function");
    try {
      await (register as RegisterEnvs)(registry);
    } catch (error) {
      return fail(`failed to register its envs: ${oneLine(error)}`);
    }
  }
}

/**
 * Why Node would read an ES module file as CommonJS, or null: a .ts or .js file written with
 * import/export whose nearest package.json says "type": "commonjs" (what `npm init -y` writes).
 * Checked before importing, so the user gets this instead of Node's warning and SyntaxError.
 */
function commonJsProblem(path: string): string | null {
  if (!/\.(ts|js)$/.test(path) || !existsSync(path)) return null;
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg)) {
      let type: unknown;
      try {
        type = (JSON.parse(readFileSync(pkg, "utf8")) as { type?: unknown }).type;
      } catch {
        return null;
      }
      if (type !== "commonjs" || !/^\s*(import|export)\s/m.test(readFileSync(path, "utf8"))) return null;
      const name = basename(path);
      return (
        `is an ES module (import/export) but ${pkg} says "type": "commonjs", so Node would read it as ` +
        `CommonJS: name it ${name.replace(/\.(ts|js)$/, ".m$1")}, or set "type": "module" there`
      );
    }
    if (dirname(dir) === dir) return null;
  }
}

function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split("\n")[0].replace(/ imported from \S+$/, "");
}

/**
 * Paths resolve from `cwd` (an existing file, or anything starting with . or /); other names are
 * packages, found beside rollgym (a project's node_modules) or else installed in `cwd` or above.
 */
async function importPlugin(spec: string, cwd: string): Promise<Record<string, unknown>> {
  const path = resolve(cwd, spec);
  if (spec.startsWith(".") || isAbsolute(spec) || existsSync(path)) return import(pathToFileURL(path).href);
  try {
    return await import(spec);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ERR_MODULE_NOT_FOUND") throw error;
    let found: string;
    try {
      found = createRequire(join(cwd, "package.json")).resolve(spec);
    } catch {
      throw error;
    }
    return import(pathToFileURL(found).href);
  }
}

/**
 * The plugins config.rollgym.plugins names. A config file is often kept beside its plugin and
 * used from elsewhere: its paths start at the file, as a tsconfig.json's or a compose file's do.
 */
export function configPlugins(
  config: RollgymConfig,
  origins: Readonly<Record<string, string>> = {},
  dirs: Readonly<Record<string, string>> = {},
): PluginRef[] {
  const dir = dirs["rollgym.plugins"];
  return config.rollgym.plugins.map((module) => ({
    module,
    from: `rollgym.plugins${suffix(origins, "rollgym.plugins")}`,
    ...(dir === undefined ? {} : { dir }),
  }));
}
