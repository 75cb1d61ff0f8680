// rollgym's configuration as a value: its type and defaults, both made from the key table
// (keys.ts), and validation against that table with errors naming the key, the value and what
// is allowed (load.ts adds where it was set).
import type { Static, TSchema } from "typebox";
import { Compile, type Validator } from "typebox/compile";
import { isPlainObject } from "../../protocol/plain-object.ts";
import type {
  ContextWindowMode,
  NormalizationGrouping,
  NormalizationMethod,
  Mode as RollgymMode,
  FilterMetric as RolloutFilterMetric,
  FilterStrategy as RolloutFilterStrategy,
  FilterType as RolloutFilterType,
} from "../../protocol/settings.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { CONFIG_KEYS, CUSTOM_ENV_KEYS, type Leaf } from "./keys.ts";

export { CONTEXT_WINDOW_MODES } from "../../protocol/settings.ts";
export { holdsMapping, type Leaf, OLD_VAL_KEYS, type PolicyName } from "./keys.ts";
export type {
  ContextWindowMode,
  NormalizationGrouping,
  NormalizationMethod,
  RollgymMode,
  RolloutFilterMetric,
  RolloutFilterStrategy,
  RolloutFilterType,
};

/** A leaf schema, as the key table holds it (the old name, kept for callers). */
export type FieldSpec = Leaf;
/** Every leaf of RollgymConfig except custom_envs, by dotted key (the old name of CONFIG_KEYS). */
export const FIELD_SPECS: Readonly<Record<string, Leaf>> = CONFIG_KEYS;
/** Fields of a custom_envs.<Tag> entry (the old name of CUSTOM_ENV_KEYS). */
export const CUSTOM_ENV_SPECS: Readonly<Record<string, Leaf>> = CUSTOM_ENV_KEYS;

/** `{a: {b: T}}` for a dotted key "a.b" of a table of schemas. */
type Nest<Table extends Record<string, TSchema>> = {
  -readonly [K in keyof Table & string as K extends `${infer Head}.${string}`
    ? Head
    : K]: K extends `${infer Head}.${string}`
    ? Nest<{ [P in keyof Table & string as P extends `${Head}.${infer Rest}` ? Rest : never]: Table[P] }>
    : Static<Table[K]>;
};

/** A custom_envs.<Tag> entry as written by the user: every field optional (see CUSTOM_ENV_KEYS). */
export type CustomEnvEntry = Partial<Nest<typeof CUSTOM_ENV_KEYS>>;
/** `es_manager.train` / `es_manager.val`: RAGEN's env layout for one mode. */
export type EnvGroupLayout = Nest<typeof CONFIG_KEYS>["es_manager"]["train"];
/** The whole configuration, typed from the key table. */
export type RollgymConfig = Nest<typeof CONFIG_KEYS> & { custom_envs: Record<string, CustomEnvEntry> };

/** A fresh copy of the defaults (RAGEN base.yaml@20daedc values), in the key table's order. */
export function defaultConfig(): RollgymConfig {
  const config: Record<string, unknown> = {};
  for (const [key, schema] of Object.entries(CONFIG_KEYS)) {
    setPath(config, key, structuredClone(schema.default), true);
    // custom_envs sits between RAGEN's sections and rollgym's, as in a written config.
    if (key === "actor_rollout_ref.rollout.gradient_analysis_bucket_mode") config.custom_envs = {};
  }
  return config as RollgymConfig;
}

/** The filter threshold RAGEN uses: rollout_filter_value, else the legacy rollout_filter_ratio. */
export function effectiveFilterValue(config: RollgymConfig): number {
  const rollout = config.actor_rollout_ref.rollout;
  return rollout.rollout_filter_value ?? rollout.rollout_filter_ratio;
}

/** A config problem; `key` is the full dotted key at fault (null for file-level errors). */
export class ConfigError extends RollgymError<"config"> {
  readonly key: string | null;
  readonly file: string | undefined;
  readonly line: number | undefined;
  constructor(key: string | null, message: string, where: { file?: string; line?: number } = {}) {
    super("config", { message });
    this.name = "ConfigError";
    this.key = key;
    this.file = where.file;
    this.line = where.line;
  }
}

/** Renders a value for a message the way it would be written in YAML/JSON. */
export function formatValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (typeof value === "string") return JSON.stringify(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

type Node = Record<string, unknown>;

function range(node: Node, integer: boolean): string {
  const min = (node.minimum ?? node.exclusiveMinimum) as number | undefined;
  const max = node.maximum as number | undefined;
  if (integer) {
    if (min !== undefined && max !== undefined) return ` from ${min} to ${max}`;
    return min !== undefined ? ` >= ${min}` : "";
  }
  const low = min === undefined ? "" : `${node.exclusiveMinimum !== undefined ? ">" : ">="} ${min}`;
  const high = max === undefined ? "" : `<= ${max}`;
  if (low && high) return ` ${low} and ${high}`;
  return low || high ? ` ${low || high}` : "";
}

/** What a key's schema allows, in words, for error messages. */
export function describeAllowed(schema: TSchema, aliases: Readonly<Record<string, string>> = {}): string {
  const node = schema as Node;
  if (typeof node["x-allowed"] === "string") return node["x-allowed"];
  if (Array.isArray(node.anyOf)) {
    const members = node.anyOf as Node[];
    const main = members.find((m) => m.type !== "null" && m.const === undefined) ?? members[0];
    const extras = members
      .filter((m) => m !== main)
      .map((m) => (m.type === "null" ? "null" : String(m.const)));
    return [describeAllowed(main as TSchema, aliases), ...extras].join(", or ");
  }
  if (Array.isArray(node.enum)) {
    const named = Object.entries(aliases).map(([from, to]) => `${from} (= ${to})`);
    return `one of ${[...node.enum, ...named].join(", ")}`;
  }
  switch (node.type) {
    case "integer": {
      const except = node["x-except"] as number[] | undefined;
      return `an integer${range(node, true)}${except ? ` except ${except.join(", ")}` : ""}`;
    }
    case "number":
      return `a finite number${range(node, false)}`;
    case "boolean":
      return "true or false";
    case "string":
      return node.pattern ? "a non-empty string" : "a string";
    default:
      return "a valid value";
  }
}

// Compiled on first use, per schema object.
const validators = new WeakMap<object, Validator>();
function validatorOf(schema: TSchema): Validator {
  let validator = validators.get(schema);
  if (!validator) {
    validator = Compile(schema);
    validators.set(schema, validator);
  }
  return validator;
}

/** A string where a list goes: one item, or comma-separated items (x-coerce). */
function coerce(schema: Leaf, value: unknown): unknown {
  if (typeof value !== "string") return value;
  if (schema["x-coerce"] === "one") return [value];
  if (schema["x-coerce"] === "comma") return value.split(",").map((u) => u.trim());
  return value;
}

/** Checks one value against its key's schema; returns it normalized (aliases resolved, lists copied). */
export function checkField(key: string, schema: Leaf, value: unknown): unknown {
  const aliases = schema["x-config"]?.aliases ?? {};
  const fail = (): never => {
    throw new ConfigError(
      key,
      `invalid value for ${key}: ${formatValue(value)}; allowed: ${describeAllowed(schema, aliases)}`,
    );
  };
  if (typeof value === "string" && Object.hasOwn(aliases, value)) return aliases[value];
  const candidate = coerce(schema, value);
  if (!validatorOf(schema).Check(candidate)) return fail();
  return typeof candidate === "object" && candidate !== null ? structuredClone(candidate) : candidate;
}

/** The value at a dotted key of a config (undefined when there is none). */
export function configValue(config: RollgymConfig, key: string): unknown {
  return getPath(config, key);
}

function getPath(root: unknown, key: string): unknown {
  let node = root;
  for (const part of key.split(".")) node = isPlainObject(node) ? node[part] : undefined;
  return node;
}

function setPath(root: Record<string, unknown>, key: string, value: unknown, create = false): void {
  const parts = key.split(".");
  let node = root;
  for (const part of parts.slice(0, -1)) {
    if (create && !isPlainObject(node[part])) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts[parts.length - 1]] = value;
}

/** RAGEN's es_manager asserts, checked with its meaning. */
function checkLayout(config: RollgymConfig, mode: "train" | "val"): void {
  const prefix = `es_manager.${mode}`;
  const { env_groups, env_configs } = config.es_manager[mode];
  const { tags, n_groups } = env_configs;
  if (tags.length !== n_groups.length) {
    throw new ConfigError(
      `${prefix}.env_configs.n_groups`,
      `invalid value for ${prefix}.env_configs.n_groups: ${formatValue(n_groups)} has ${n_groups.length} ` +
        `${n_groups.length === 1 ? "entry" : "entries"} but ${prefix}.env_configs.tags ${formatValue(tags)} has ${tags.length}; ` +
        "allowed: one group count per tag (RAGEN gives tags[i] n_groups[i] groups and asserts equal lengths)",
    );
  }
  const sum = n_groups.reduce((a, b) => a + b, 0);
  if (sum !== env_groups) {
    throw new ConfigError(
      `${prefix}.env_configs.n_groups`,
      `invalid value for ${prefix}.env_configs.n_groups: ${formatValue(n_groups)} sums to ${sum} but ` +
        `${prefix}.env_groups is ${env_groups}; allowed: counts summing to env_groups (RAGEN lays out ` +
        `n_groups[i] groups of tags[i], group_size envs each, and asserts sum(n_groups) == env_groups)` +
        (tags.length === 1 ? `; with one tag set ${prefix}.env_configs.n_groups=[${env_groups}]` : ""),
    );
  }
}

/**
 * Validates a whole config (types, ranges, enums, RAGEN's layout asserts) and returns a
 * normalized copy. Throws ConfigError naming the first bad key.
 */
export function validateConfig(config: RollgymConfig): RollgymConfig {
  const out = structuredClone(config);
  const root = out as unknown as Record<string, unknown>;
  for (const [key, schema] of Object.entries(FIELD_SPECS)) {
    setPath(root, key, checkField(key, schema, getPath(root, key)));
  }
  if (!isPlainObject(out.custom_envs)) {
    throw new ConfigError(
      "custom_envs",
      `invalid value for custom_envs: ${formatValue(out.custom_envs)}; allowed: a mapping of tag to entry`,
    );
  }
  for (const [tag, entry] of Object.entries(out.custom_envs)) {
    const prefix = `custom_envs.${tag}`;
    if (!isPlainObject(entry)) {
      throw new ConfigError(
        prefix,
        `invalid value for ${prefix}: ${formatValue(entry)}; allowed: a mapping of env keys`,
      );
    }
    const record = entry as Record<string, unknown>;
    for (const [field, value] of Object.entries(record)) {
      const spec = CUSTOM_ENV_SPECS[field];
      if (!spec) {
        throw new ConfigError(
          `${prefix}.${field}`,
          `unknown config key ${prefix}.${field}; allowed keys: ${Object.keys(CUSTOM_ENV_SPECS).join(", ")}`,
        );
      }
      record[field] = checkField(`${prefix}.${field}`, spec, value);
    }
  }
  checkLayout(out, "train");
  checkLayout(out, "val");
  return out;
}
