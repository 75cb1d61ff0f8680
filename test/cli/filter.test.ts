// `rollgym filter`, run through npx: RAGEN's examples and the input errors.

import { describe, expect, it } from "vitest";
import { expectUsageError, rollgym } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const run = async (groups: unknown, flags: string[] = []) => {
  const r = await rollgym(["filter", ...flags], JSON.stringify(groups));
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as { scores: number[]; kept: number[]; buckets?: number[] };
};

describe.concurrent("rollgym filter", () => {
  it("reproduces RAGEN's linear top-p examples (one-score groups, --metric reward)", async () => {
    expect((await run([[4], [3], [2], [1]], ["--metric", "reward", "--value", "0.6"])).kept).toEqual([0, 1]);
    expect(
      (await run([[3], [1], [1], [0]], ["--metric", "reward", "--value", "0.9", "--include-zero", "false"]))
        .kept,
    ).toEqual([0, 1, 2]);
    expect((await run([[10], [1], [0], [0]], ["--metric", "reward", "--value", "0.9"])).kept).toEqual([0]);
  });

  it("defaults to RAGEN's base.yaml: reward std, top_p 1.0, keeps everything", async () => {
    const out = await run([
      [0, 1],
      [1, 1],
      [0, 10.9],
    ]);
    expect(out.kept).toEqual([0, 1, 2]);
    // float32 unbiased std, printed as the float32 value.
    expect(out.scores).toEqual([Math.fround(Math.SQRT1_2), 0, Math.fround(7.70746374130249)]);
    expect(out.buckets).toBeUndefined();
  });

  it("runs the other strategies on hand-computed cases", async () => {
    const groups = [[5], [1], [3], [0], [2]];
    const reward = ["--metric", "reward"];
    // top_k: int(0.4 × 5) = 2 largest.
    expect((await run(groups, [...reward, "--strategy", "top_k", "--value", "0.4"])).kept).toEqual([0, 2]);
    // top_k smallest, include_zero false: the zero group is removed first, then 2 smallest.
    expect(
      (
        await run(groups, [
          ...reward,
          "--strategy",
          "top_k",
          "--value",
          "0.4",
          "--type",
          "smallest",
          "--include-zero",
          "false",
        ])
      ).kept,
    ).toEqual([1, 4]);
    // top_k_abs: exactly int(value) groups.
    expect((await run(groups, [...reward, "--strategy", "top_k_abs", "--value", "3"])).kept).toEqual([
      0, 2, 4,
    ]);
    // min_p largest: keep s >= 5 × 0.5.
    expect((await run(groups, [...reward, "--strategy", "min_p", "--value", "0.5"])).kept).toEqual([0, 2]);
    // softmax top-p: softmax([5,1,3,0,2]) ≈ [.836,.015,.113,.006,.031]; cum ≥ 0.9 after 2 groups.
    expect((await run(groups, [...reward, "--top-p-mode", "softmax", "--value", "0.9"])).kept).toEqual([
      0, 2,
    ]);
  });

  it("adds quantile and fixed_rv buckets per group", async () => {
    const groups = [
      [0, 0],
      [0, 3],
      [0, 1],
      [0, 10],
    ];
    expect((await run(groups, ["--buckets", "2"])).buckets).toEqual([1, 2, 1, 2]);
    // stds 0, 2.12, 0.71, 7.07 → fixed intervals [0,1) [1,2) [2,3) … [5,∞).
    expect((await run(groups, ["--buckets", "6", "--bucket-mode", "fixed_rv"])).buckets).toEqual([
      1, 3, 1, 6,
    ]);
  });

  it("rejects bad input with one line and exit status 2", async () => {
    expectUsageError(await rollgym(["filter"], "[[0,1],[2]]"), ["same size", "group 1"]);
    expectUsageError(await runInProcess(["filter"], '[[0,"x"]]'), ["group 0 score 1", "finite number"]);
    expectUsageError(await runInProcess(["filter"], "[[0,1],"), ["invalid JSON"]);
    expectUsageError(await runInProcess(["filter"], "[]"), ["non-empty"]);
    expectUsageError(await runInProcess(["filter"], "[[1],[2]]"), ["reward_variance", "2"]);
    expectUsageError(await runInProcess(["filter", "--strategy", "top_q"], "[[1,2]]"), [
      "--strategy",
      "top_p, top_k",
    ]);
    expectUsageError(await runInProcess(["filter", "--value", "abc"], "[[1,2]]"), ["--value"]);
    expectUsageError(await runInProcess(["filter", "--include-zero", "yes"], "[[1,2]]"), [
      "--include-zero",
      "true, false",
    ]);
    expectUsageError(await runInProcess(["filter", "--bucket-mode", "quantile"], "[[1,2]]"), ["--buckets"]);
  });
});
