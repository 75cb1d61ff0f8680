// Merges `rollgym bench --json` outputs into one Markdown table and one set of SVG charts, for
// bench/RESULTS.md: node bench/bench-report.ts OUT_DIR run1.json run2.json …
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { markdownTable, svgCharts } from "../src/bench/report.ts";
import type { CaseResult } from "../src/bench/run.ts";

const [dir, ...files] = process.argv.slice(2);
if (!dir || files.length === 0) {
  process.stderr.write("usage: node bench/bench-report.ts OUT_DIR BENCH.json …\n");
  process.exit(2);
}
const results = files.flatMap(
  (f) => (JSON.parse(readFileSync(f, "utf8")) as { results: CaseResult[] }).results,
);
mkdirSync(dir, { recursive: true });
for (const chart of svgCharts(results)) writeFileSync(join(dir, chart.file), chart.svg);
process.stdout.write(`${markdownTable(results)}\n`);
