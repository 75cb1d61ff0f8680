// `rollgym bench async` results as people read them: one row per mode (sync, then each
// max_staleness), as a text or Markdown table under a line describing the workload.
import type { AsyncBenchResult, AsyncModeResult } from "./async-run.ts";

interface Column {
  title: string;
  value: (m: AsyncModeResult) => string;
}

const fixed = (v: number | null, digits: number): string => (v === null ? "–" : v.toFixed(digits));

/** Ages as "age:count" pairs, youngest first. */
function formatAges(ages: Record<string, number>): string {
  return Object.entries(ages)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([age, count]) => `${age}:${count}`)
    .join(" ");
}

const COLUMNS: Column[] = [
  { title: "mode", value: (m) => m.mode },
  { title: "s/step", value: (m) => fixed(m.s_per_step, 2) },
  { title: "p50 s/step", value: (m) => fixed(m.s_per_step_p50, 2) },
  { title: "speedup", value: (m) => fixed(m.speedup_vs_sync, 2) },
  { title: "waited s/step", value: (m) => fixed(m.wait_s_per_step, 2) },
  { title: "groups/s", value: (m) => fixed(m.groups_per_s, 2) },
  { title: "tokens/s", value: (m) => fixed(m.engine_tokens_per_s, 0) },
  { title: "ages (age:groups)", value: (m) => formatAges(m.ages) },
  {
    title: "paused ms p50/max",
    value: (m) => `${fixed(m.update.paused_ms_p50, 1)}/${fixed(m.update.paused_ms_max, 1)}`,
  },
  { title: "in flight at update", value: (m) => fixed(m.update.in_flight_mean, 1) },
  { title: "lost/dup", value: (m) => `${m.groups_lost}/${m.groups_duplicated}` },
  { title: "unused", value: (m) => String(m.groups_unused) },
];

function header(r: AsyncBenchResult): string {
  const w = r.workload;
  const source = r.step_time_source === "measured" ? "measured sync rollout time per step" : "--step-time";
  return (
    `${w.tag}, ${w.groups_per_step} groups × ${w.group_size} episodes per step, up to ${w.max_turn} turns, ` +
    `max_tokens ${w.max_tokens}, ${w.replicas} mock engine(s), pause mode ${w.pause_mode}; ` +
    `trainer step ${r.step_time_s} s (${source}). Latency model ${w.latency_model}: ${w.latency_model_description}`
  );
}

export function asyncTextTable(r: AsyncBenchResult): string {
  const rows = [COLUMNS.map((c) => c.title), ...r.modes.map((m) => COLUMNS.map((c) => c.value(m)))];
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  return [
    header(r),
    "",
    ...rows.map((row) =>
      row
        .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])))
        .join("  ")
        .trimEnd(),
    ),
  ].join("\n");
}

export function asyncMarkdownTable(r: AsyncBenchResult): string {
  return [
    `| ${COLUMNS.map((c) => c.title).join(" | ")} |`,
    `|${COLUMNS.map((_, i) => (i === 0 ? "---" : "---:")).join("|")}|`,
    ...r.modes.map((m) => `| ${COLUMNS.map((c) => c.value(m)).join(" | ")} |`),
    "",
    header(r),
  ].join("\n");
}
