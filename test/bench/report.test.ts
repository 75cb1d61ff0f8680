// `rollgym bench`'s terminal table, on the committed results of bench/rollgym-bench (written
// before modes and the floor: those columns read "–"): every column kept, and each line within
// 120 columns (one row of all columns was ~290).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { textTable } from "../../src/bench/report.ts";
import type { CaseResult } from "../../src/bench/run.ts";
import { ROOT } from "../helpers/cli.ts";

describe("the bench's text table", () => {
  it("fits 120 columns as three tables, throughput, resources and cost, with every column", () => {
    const { results } = JSON.parse(
      readFileSync(join(ROOT, "bench", "rollgym-bench", "final-default.json"), "utf8"),
    ) as { results: CaseResult[] };
    const text = textTable(results);
    const table = text.split("\n").filter((l) => !/^(Latency model|Episodes:)/.test(l));
    expect(Math.max(...table.map((l) => l.length))).toBeLessThanOrEqual(120);
    expect(table.filter((l) => l === "Throughput" || l === "Resources" || l === "Cost")).toHaveLength(3);
    for (const title of [
      "episodes/s",
      "p50/p99/max s",
      "ms/req",
      "RSS peak",
      "rollgym/generator",
      "window",
      "÷undici",
    ])
      expect(text).toContain(title);
    // Every case appears in every table, as chat mode (the mode of every run before modes).
    expect(table.filter((l) => /^\s*chat\s+10240\s+1\s+default/.test(l))).toHaveLength(3);
  });
});
