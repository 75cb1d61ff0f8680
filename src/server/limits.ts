// The server's limits as its parts hold them, derived from the one LIMITS table
// (protocol/settings.ts): each part's defaults, the options `rollgym serve` reads from the
// configuration (rollgym.server.*), and `welcome.limits`.
import { getHeapStatistics } from "node:v8";
import {
  LIMITS,
  type LimitMeta,
  type LimitName,
  type LimitPart,
  type LimitValues,
  limitOption,
} from "../../protocol/settings.ts";
import { configValue, type RollgymConfig } from "../config/schema.ts";

const NAMES = Object.keys(LIMITS) as LimitName[];
const meta = (name: LimitName): LimitMeta => LIMITS[name]["x-limit"];
/** A value as the server holds it: seconds in milliseconds. */
const held = (name: LimitName, value: number) => (meta(name).unit === "s" ? value * 1000 : value);

/**
 * The default memory budget: 512 MiB, or an eighth of V8's heap limit when that is smaller.
 * What is charged is what stays reachable; the heap also holds garbage between full GCs (up to
 * 3× what survived the last one with serve's settings) and the server's own data, so the budget
 * stays well below the limit.
 */
function defaultMaxHeldBytes(): number {
  return Math.min(512 << 20, Math.floor(getHeapStatistics().heap_size_limit / 8));
}

/** Limits whose configured default is null: computed on this machine. */
const COMPUTED: Partial<Record<LimitName, () => number>> = { max_held_bytes: defaultMaxHeldBytes };

/** A part's limits from `value(name)` (null or undefined: left out). */
function partOf<P extends LimitPart>(part: P, value: (name: LimitName) => unknown): Partial<LimitValues<P>> {
  const entries = NAMES.filter((name) => meta(name).part === part).flatMap((name) => {
    const v = value(name);
    return typeof v === "number" ? [[limitOption(name), held(name, v)]] : [];
  });
  return Object.fromEntries(entries) as Partial<LimitValues<P>>;
}

/** A part's defaults. */
export function limitDefaults<P extends LimitPart>(part: P): LimitValues<P> {
  return partOf(part, (name) => LIMITS[name].default ?? COMPUTED[name]?.()) as unknown as LimitValues<P>;
}

/** buildServer's limit options as the configuration sets them (a null max_held_bytes: the computed default). */
export function limitOptions(config: RollgymConfig) {
  const value = (name: LimitName) => configValue(config, LIMITS[name]["x-config"].key);
  return {
    ...partOf("server", value),
    connections: partOf("connections", value),
    watch: partOf("watch", value),
    openenv: partOf("openenv", value),
    files: partOf("files", value),
  };
}

/**
 * `welcome.limits` from the parts' values, in the table's order: seconds as seconds, a value
 * capped by its `atMost`, and deprecated names after the run of limits they stand for (so
 * max_env_bytes and max_env_bytes_per_connection follow max_held_bytes_per_connection, as they
 * always have). A trainer's welcome also has the trainer-only ones.
 */
export function welcomeLimits(
  parts: { [P in LimitPart]?: Partial<LimitValues<P>> },
  trainer = false,
): Record<string, number> {
  const wire = (name: LimitName): number => {
    const m = meta(name);
    const value = (parts[m.part] as Record<string, number>)[limitOption(name)];
    const sent = m.unit === "s" ? value / 1000 : value;
    return m.atMost ? Math.min(sent, wire(m.atMost as LimitName)) : sent;
  };
  const limits: Record<string, number> = {};
  let aliases: [string, number][] = [];
  for (const name of NAMES) {
    const m = meta(name);
    if (m.welcome === null || (m.welcome === "trainer" && !trainer)) continue;
    const value = wire(name);
    if (!m.alias) {
      for (const [alias, v] of aliases) limits[alias] = v;
      aliases = [];
    }
    limits[name] = value;
    if (m.alias) aliases.push([m.alias, value]);
  }
  for (const [alias, v] of aliases) limits[alias] = v;
  return limits;
}
