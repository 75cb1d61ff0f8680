// `rollgym filter`: RAGEN's group filter on scores read from stdin.

import { type Setting, WIRE_FILTER } from "../../protocol/settings.ts";
import { inContext } from "../errors/boundary.ts";
import { BUCKET_MODES, type BucketMode, bucketGroups } from "../rollout/buckets.ts";
import {
  DEFAULT_FILTER,
  type FilterConfig,
  filterNote,
  groupStats,
  runGroupFilter,
} from "../rollout/filter.ts";
import {
  expectPositionals,
  type FlagSpec,
  parseArgs,
  parseBoolean,
  parseChoice,
  parseInteger,
  parseNumber,
  UsageError,
} from "./args.ts";
import { say } from "./io.ts";
import { LineWriter, PRETTY_FLAG, readStdin } from "./output.ts";

/** A setting's flag: its wire name with dashes (top_p_mode: --top-p-mode). */
const flagOf = (name: string): string => name.replaceAll("_", "-");

type SettingSchema = Setting & { enum?: string[]; type?: string; minimum?: number; maximum?: number };
const FILTER_SETTINGS = Object.entries(WIRE_FILTER) as [keyof typeof WIRE_FILTER, SettingSchema][];

/** A flag for each filter setting a rollout request may carry, its help from the table. */
const SETTING_FLAGS: Record<string, FlagSpec> = Object.fromEntries(
  FILTER_SETTINGS.map(([name, setting]) => {
    const arg = setting.enum?.join("|") ?? (setting.type === "boolean" ? "true|false" : "V");
    const help = `${setting.description} (default ${String(setting.default)})`;
    return [flagOf(name), { kind: "value", arg, help }];
  }),
);

/** A flag's text as its setting's value, refused (naming the flag) when the setting does not allow it. */
function parseSetting(flag: string, text: string, setting: SettingSchema): unknown {
  if (setting.enum) return parseChoice(flag, text, setting.enum);
  if (setting.type === "boolean") return parseBoolean(flag, text);
  const value = parseNumber(flag, text);
  if (setting.minimum !== undefined && value < setting.minimum)
    throw new UsageError(`${flag}: ${value} must be >= ${setting.minimum}`);
  if (setting.maximum !== undefined && value > setting.maximum)
    throw new UsageError(`${flag}: ${value} must be <= ${setting.maximum}`);
  return value;
}

export const FILTER_FLAGS: Record<string, FlagSpec> = {
  ...SETTING_FLAGS,
  buckets: { kind: "value", arg: "N", help: "gradient-analysis bucket count" },
  "bucket-mode": { kind: "value", arg: "M", help: BUCKET_MODES.join("|") },
  ...PRETTY_FLAG,
};

export async function filterCommand(argv: readonly string[]): Promise<void> {
  const command = "filter";
  const args = parseArgs(command, argv, FILTER_FLAGS);
  expectPositionals(command, args, []);
  const get = <T>(flag: string, parse: (text: string) => T, fallback: T): T => {
    const text = args.values.get(flag);
    return text === undefined ? fallback : parse(text);
  };
  const config: FilterConfig = { ...DEFAULT_FILTER };
  for (const [name, setting] of FILTER_SETTINGS) {
    const text = args.values.get(flagOf(name));
    if (text !== undefined)
      Object.assign(config, { [name]: parseSetting(`--${flagOf(name)}`, text, setting) });
  }
  const note = filterNote(config, "--value");
  if (note) say(note);
  const buckets = get("buckets", (t) => parseInteger("--buckets", t, 1, 1000), undefined);
  const bucketMode = get<BucketMode | undefined>(
    "bucket-mode",
    (t) => parseChoice("--bucket-mode", t, BUCKET_MODES),
    undefined,
  );
  if (bucketMode !== undefined && buckets === undefined)
    throw new UsageError("--bucket-mode needs --buckets N");

  const groups = parseGroups(await readStdin());
  try {
    const result = runGroupFilter(groups, config);
    const out: Record<string, unknown> = { scores: Array.from(result.scores), kept: result.kept };
    if (buckets !== undefined) {
      if (groups[0].length < 2) {
        throw new UsageError(
          "stdin: --buckets ranks groups by reward std, which needs groups of at least 2 scores",
        );
      }
      out.buckets = bucketGroups(groupStats(groups).std, buckets, bucketMode ?? "quantile");
    }
    const writer = new LineWriter(args.switches.has("pretty"));
    await writer.line(out);
    await writer.flush();
  } catch (error) {
    throw inContext(error, "filter_input", "stdin");
  }
}

/** A non-empty JSON array of equally sized, non-empty arrays of finite numbers. */
function parseGroups(text: string): number[][] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new UsageError(
      `stdin: invalid JSON (${reason}); expected an array of groups, e.g. [[0, 1], [1, 1]]`,
    );
  }
  if (!Array.isArray(data) || data.length === 0) {
    throw new UsageError("stdin: expected a non-empty JSON array of groups, each an array of episode scores");
  }
  const size = Array.isArray(data[0]) ? data[0].length : -1;
  data.forEach((group, g) => {
    if (!Array.isArray(group) || group.length === 0) {
      throw new UsageError(`stdin: group ${g} is not a non-empty array of scores`);
    }
    if (group.length !== size) {
      throw new UsageError(
        `stdin: groups must all have the same size; group 0 has ${size} scores, group ${g} has ${group.length}`,
      );
    }
    group.forEach((score, i) => {
      if (typeof score !== "number" || !Number.isFinite(score)) {
        throw new UsageError(`stdin: group ${g} score ${i} is ${JSON.stringify(score)}, not a finite number`);
      }
    });
  });
  return data as number[][];
}
