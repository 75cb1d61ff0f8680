// `rollgym filter`: RAGEN's group filter on scores read from stdin.

import { FILTER_METRICS, FILTER_STRATEGIES, FILTER_TYPES, TOP_P_MODES } from "../../protocol/settings.ts";
import { inContext } from "../errors/boundary.ts";
import { BUCKET_MODES, type BucketMode, bucketGroups } from "../rollout/buckets.ts";
import { DEFAULT_FILTER, filterNote, groupStats, runGroupFilter } from "../rollout/filter.ts";
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

export const FILTER_FLAGS: Record<string, FlagSpec> = {
  strategy: { kind: "value", arg: "S", help: `${FILTER_STRATEGIES.join("|")} (default top_p)` },
  value: { kind: "value", arg: "V", help: "threshold (default 1.0)" },
  "top-p-mode": { kind: "value", arg: "M", help: `${TOP_P_MODES.join("|")} (default linear)` },
  type: { kind: "value", arg: "T", help: `${FILTER_TYPES.join("|")} (default largest)` },
  "include-zero": { kind: "value", arg: "B", help: "true|false (default true)" },
  metric: { kind: "value", arg: "M", help: `${FILTER_METRICS.join("|")} (default reward_variance)` },
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
  const config = {
    ...DEFAULT_FILTER,
    strategy: get(
      "strategy",
      (t) => parseChoice("--strategy", t, FILTER_STRATEGIES),
      DEFAULT_FILTER.strategy,
    ),
    value: get("value", (t) => parseNumber("--value", t), DEFAULT_FILTER.value),
    topPMode: get("top-p-mode", (t) => parseChoice("--top-p-mode", t, TOP_P_MODES), DEFAULT_FILTER.topPMode),
    type: get("type", (t) => parseChoice("--type", t, FILTER_TYPES), DEFAULT_FILTER.type),
    includeZero: get("include-zero", (t) => parseBoolean("--include-zero", t), DEFAULT_FILTER.includeZero),
    metric: get("metric", (t) => parseChoice("--metric", t, FILTER_METRICS), DEFAULT_FILTER.metric),
  };
  if (config.value < 0) throw new UsageError(`--value: ${config.value} must be >= 0`);
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
