// A bench's results as people read them: a text or Markdown table, and small SVG line charts
// (hand-written: one polyline per replica count and latency model, log-scaled x axis).
import type { CaseResult } from "./run.ts";

interface Column {
  title: string;
  /** A shorter title for the terminal's tables, where the title is the column's width. */
  short?: string;
  value: (r: CaseResult) => string;
}

const fixed = (v: number | null | undefined, digits: number): string => (v == null ? "–" : v.toFixed(digits));
const mib = (bytes: number | null | undefined): string =>
  bytes == null ? "–" : `${Math.round(bytes / 2 ** 20)}`;

const COLUMNS: Column[] = [
  // Results written before modes were all chat mode.
  { title: "mode", value: (r) => r.mode ?? "chat" },
  { title: "in flight", value: (r) => String(r.episodes_in_flight) },
  { title: "replicas", value: (r) => String(r.replicas) },
  { title: "model", value: (r) => r.latency_model },
  { title: "episodes/s", value: (r) => fixed(r.episodes_per_s, 1) },
  { title: "turns/s", value: (r) => fixed(r.turns_per_s, 1) },
  { title: "requests/s", value: (r) => fixed(r.requests_per_s, 1) },
  { title: "tokens/s", value: (r) => fixed(r.tokens_per_s, 0) },
  {
    title: "group p50/p99/max s",
    value: (r) =>
      `${fixed(r.group_latency_ms.p50 / 1000, 2)}/${fixed(r.group_latency_ms.p99 / 1000, 2)}/${fixed(r.group_latency_ms.max / 1000, 2)}`,
  },
  { title: "server CPU ms/req", value: (r) => fixed(r.server_cpu_ms_per_request, 3) },
  { title: "server cores", value: (r) => fixed(r.server_cpu_cores, 2) },
  { title: "loop lag p99 ms", value: (r) => fixed(r.event_loop_lag_p99_ms, 1) },
  { title: "RSS peak MiB", value: (r) => mib(r.server_rss_peak_bytes) },
  { title: "engine cores", value: (r) => fixed(r.engine_cpu_cores, 2) },
  { title: "bench cores", value: (r) => fixed(r.bench_cpu_cores, 2) },
  { title: "saturation", value: (r) => fixed(r.saturation_ratio, 2) },
  {
    title: "engine batch rollgym/generator",
    value: (r) => `${r.engine_running_mean ?? "–"}/${r.load_generator?.engine_running_mean ?? "–"}`,
  },
  { title: "finished/failed", value: (r) => `${r.episodes_finished}/${r.episodes_failed}` },
  { title: "window s", value: (r) => fixed(r.window_s, 1) },
  { title: "engine req/turn", value: (r) => fixed(r.engine_requests_per_turn, 2) },
  { title: "server CPU ms/turn", short: "CPU ms/turn", value: (r) => fixed(r.server_cpu_ms_per_turn, 3) },
  {
    title: "tokens/chat CPU/turn",
    short: "tok/chat CPU",
    value: (r) => fixed(r.tokens_over_chat?.server_cpu_per_turn, 2),
  },
  {
    title: "floor raw ms/req",
    short: "raw ms/req",
    value: (r) => fixed(r.floor?.raw?.cpu_ms_per_request, 4),
  },
  {
    title: "floor undici ms/req",
    short: "undici ms/req",
    value: (r) => fixed(r.floor?.undici?.cpu_ms_per_request, 4),
  },
  { title: "server ÷ raw", short: "server ÷raw", value: (r) => fixed(r.server_over_floor?.raw, 2) },
  { title: "server ÷ undici", short: "server ÷undici", value: (r) => fixed(r.server_over_floor?.undici, 2) },
  { title: "RSS now MiB", value: (r) => mib(r.server_rss_bytes) },
  { title: "RSS bound MiB", short: "bound MiB", value: (r) => mib(r.server_rss_bound_bytes) },
];

/** The case's key: the first columns of every table. */
const KEY = 4;

/** Columns after the key that make up the cost table (modes, floor, memory bound). */
const COST = new Set([
  "engine req/turn",
  "server CPU ms/turn",
  "tokens/chat CPU/turn",
  "floor raw ms/req",
  "floor undici ms/req",
  "server ÷ raw",
  "server ÷ undici",
  "RSS now MiB",
  "RSS bound MiB",
]);

/** Columns after the key that make up the throughput table. */
const THROUGHPUT = new Set([
  "episodes/s",
  "turns/s",
  "requests/s",
  "tokens/s",
  "group p50/p99/max s",
  "finished/failed",
  "window s",
]);

/**
 * For a terminal: three tables (throughput, resources, cost against the floor and between
 * modes), each keyed by the case, with titles over two lines, so each fits about 120 columns
 * instead of one row of ~400.
 */
export function textTable(results: readonly CaseResult[]): string {
  const key = COLUMNS.slice(0, KEY);
  const rest = COLUMNS.slice(KEY);
  const block = (name: string, columns: Column[]): string[] => {
    const titles = columns.map((c) => splitTitle(c.short ?? c.title));
    const rows = [
      titles.map((t) => t[0]),
      titles.map((t) => t[1]),
      ...results.map((r) => columns.map((c) => c.value(r))),
    ];
    const widths = columns.map((_, i) => Math.max(...rows.map((row) => row[i].length)));
    return [
      name,
      ...rows.map((row) =>
        row
          .map((cell, i) => cell.padStart(widths[i]))
          .join("  ")
          .trimEnd(),
      ),
    ];
  };
  return [
    ...block("Throughput", [...key, ...rest.filter((c) => THROUGHPUT.has(c.title))]),
    "",
    ...block("Resources", [...key, ...rest.filter((c) => !THROUGHPUT.has(c.title) && !COST.has(c.title))]),
    "",
    ...block("Cost", [...key, ...rest.filter((c) => COST.has(c.title))]),
    "Cost: engine requests and server CPU per turn; tok/chat = token mode ÷ chat mode; raw, undici = the floor",
    "clients' own CPU per request; server ÷ = server CPU per request ÷ theirs; bound = the docs' RSS bound.",
    "",
    ...describeModels(results),
  ].join("\n");
}

/** A column title as two header lines, split at the space nearest its middle. */
function splitTitle(title: string): [string, string] {
  const spaces = [...title.matchAll(/ /g)].map((m) => m.index);
  if (spaces.length === 0) return ["", title];
  const at = spaces.reduce((best, i) =>
    Math.abs(i - title.length / 2) < Math.abs(best - title.length / 2) ? i : best,
  );
  return [title.slice(0, at), title.slice(at + 1)];
}

export function markdownTable(results: readonly CaseResult[]): string {
  const lines = [
    `| ${COLUMNS.map((c) => c.title).join(" | ")} |`,
    `|${COLUMNS.map(() => "---:").join("|")}|`,
    ...results.map((r) => `| ${COLUMNS.map((c) => c.value(r)).join(" | ")} |`),
  ];
  return [...lines, "", ...describeModels(results)].join("\n");
}

/** The latency models and settings behind the rows, printed under every table. */
function describeModels(results: readonly CaseResult[]): string[] {
  const seen = new Map<string, string>();
  for (const r of results) seen.set(r.latency_model, r.latency_model_description);
  const first = results[0];
  const shape = first
    ? [
        `Episodes: group_size ${first.group_size}, max_turn ${first.max_turn}, max_tokens ${first.max_tokens}, ${first.clients} trainer connection${first.clients > 1 ? "s" : ""}.`,
      ]
    : [];
  const bounds = [
    ...new Set(
      results.flatMap((r) =>
        r.server_rss_bound_derivation
          ? [`${r.episodes_in_flight} in flight: ${r.server_rss_bound_derivation}`]
          : [],
      ),
    ),
  ];
  return [
    ...[...seen].map(([name, text]) => `Latency model ${name}: ${text}.`),
    ...shape,
    ...(bounds.length > 0 ? wrap(`RSS bound, ${bounds.join("; ")}.`, 110) : []),
  ];
}

/** `text` in lines of at most `width` characters, broken at spaces. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === "" ? word : `${line} ${word}`;
  }
  return line === "" ? lines : [...lines, line];
}

interface Chart {
  file: string;
  title: string;
  unit: string;
  value: (r: CaseResult) => number | null;
}

const CHARTS: Chart[] = [
  {
    file: "episodes-per-s.svg",
    title: "Episodes per second",
    unit: "episodes/s",
    value: (r) => r.episodes_per_s,
  },
  {
    file: "requests-per-s.svg",
    title: "Inference requests per second",
    unit: "requests/s",
    value: (r) => r.requests_per_s,
  },
  {
    file: "server-cpu-per-request.svg",
    title: "Server CPU time per inference request",
    unit: "ms",
    value: (r) => r.server_cpu_ms_per_request,
  },
  {
    file: "saturation.svg",
    title: "Engine saturation ratio",
    unit: "ratio",
    value: (r) => r.saturation_ratio,
  },
  {
    file: "event-loop-lag.svg",
    title: "Server event-loop lag p99",
    unit: "ms",
    value: (r) => r.event_loop_lag_p99_ms,
  },
  {
    file: "rss.svg",
    title: "Server peak RSS",
    unit: "MiB",
    value: (r) => (r.server_rss_peak_bytes === null ? null : r.server_rss_peak_bytes / 2 ** 20),
  },
];

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

/** One SVG per figure, x = episodes in flight (log scale), one line per replicas × model. */
export function svgCharts(results: readonly CaseResult[]): { file: string; svg: string }[] {
  return CHARTS.map((chart) => ({ file: chart.file, svg: lineChart(chart, results) }));
}

function lineChart(chart: Chart, results: readonly CaseResult[]): string {
  const width = 560;
  const height = 320;
  const left = 64;
  const right = 150;
  const top = 36;
  const bottom = 44;
  const series = new Map<string, CaseResult[]>();
  for (const r of results) {
    const key = `${r.replicas} replica${r.replicas > 1 ? "s" : ""}, ${r.latency_model}`;
    series.set(key, [...(series.get(key) ?? []), r]);
  }
  const xs = [...new Set(results.map((r) => r.episodes_in_flight))].sort((a, b) => a - b);
  const values = results.map(chart.value).filter((v): v is number => v !== null && Number.isFinite(v));
  const yMax = niceCeiling(Math.max(...values, 0));
  const logMin = Math.log10(xs[0] ?? 1);
  const logSpan = Math.max(Math.log10(xs[xs.length - 1] ?? 10) - logMin, 1e-9);
  const x = (n: number) =>
    xs.length === 1
      ? left + (width - left - right) / 2
      : left + ((Math.log10(n) - logMin) / logSpan) * (width - left - right);
  const y = (v: number) => top + (1 - v / yMax) * (height - top - bottom);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<title>${escapeXml(chart.title)}</title>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${left}" y="20" font-size="14" font-weight="bold">${escapeXml(chart.title)}</text>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    parts.push(
      `<line x1="${left}" y1="${y(v)}" x2="${width - right}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${formatTick(v)}</text>`,
    );
  }
  for (const n of xs) {
    parts.push(`<text x="${x(n)}" y="${height - bottom + 16}" text-anchor="middle">${n}</text>`);
  }
  parts.push(
    `<text x="${(left + width - right) / 2}" y="${height - 8}" text-anchor="middle">episodes in flight</text>`,
    `<text x="14" y="${(top + height - bottom) / 2}" transform="rotate(-90 14 ${(top + height - bottom) / 2})" text-anchor="middle">${escapeXml(chart.unit)}</text>`,
  );
  [...series].forEach(([name, rows], i) => {
    const color = COLORS[i % COLORS.length];
    const points = rows
      .map((r) => [r.episodes_in_flight, chart.value(r)] as const)
      .filter((p): p is readonly [number, number] => p[1] !== null && Number.isFinite(p[1]))
      .sort((a, b) => a[0] - b[0]);
    if (points.length > 1)
      parts.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.map(([n, v]) => `${x(n).toFixed(1)},${y(v).toFixed(1)}`).join(" ")}"/>`,
      );
    for (const [n, v] of points)
      parts.push(`<circle cx="${x(n).toFixed(1)}" cy="${y(v).toFixed(1)}" r="3" fill="${color}"/>`);
    parts.push(
      `<rect x="${width - right + 12}" y="${top + i * 18}" width="10" height="10" fill="${color}"/>`,
      `<text x="${width - right + 26}" y="${top + i * 18 + 9}">${escapeXml(name)}</text>`,
    );
  });
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}

function niceCeiling(v: number): number {
  if (v <= 0) return 1;
  const step = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * step >= v) return m * step;
  return 10 * step;
}

function formatTick(v: number): string {
  return v >= 100 ? v.toFixed(0) : v >= 1 ? String(Number(v.toFixed(1))) : String(Number(v.toFixed(3)));
}

function escapeXml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}
