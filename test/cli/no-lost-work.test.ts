// Issue #20, "no lost work, no wrong picture": what a new user still hit, re-run as written.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { register as registerNumberLine } from "../../examples/number-line.ts";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import { startMockEngine } from "../../src/mock-engine/server.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { expectUsageError, ROOT } from "../helpers/cli.ts";
import { writeInterruptedEpisodes } from "../web/fixtures.ts";
import { runInProcess } from "./in-process.ts";

const dir = mkdtempSync(join(tmpdir(), "rollgym-no-lost-work-"));
const SMALL = ["rollout", "--tag", "Bandit", "--groups", "2", "--group-size", "2", "--json"];

describe.concurrent("no lost work", () => {
  it("rollout --out refuses to replace a file that has content, unless --force", async () => {
    const path = join(dir, "earlier-run.jsonl");
    writeFileSync(path, "hours of engine time\n");
    expectUsageError(await runInProcess([...SMALL, "--out", path]), ["--out", "already exists", "--force"]);
    expect(readFileSync(path, "utf8")).toBe("hours of engine time\n");

    const forced = await runInProcess([...SMALL, "--out", path, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(readFileSync(path, "utf8")).toMatch(/^\{"type":"header"/);
  });

  it("rollout --out writes an empty file it finds (mktemp) without --force", async () => {
    const path = join(dir, "made-by-mktemp.jsonl");
    writeFileSync(path, "");
    const r = await runInProcess([...SMALL, "--out", path]);
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(path, "utf8")).toMatch(/"type":"summary"/);
  });
});

describe.concurrent("RAGEN's config files", () => {
  // Trainer-only sections as RAGEN's base.yaml has them (it has some 80 such keys).
  const base = join(dir, "base.yaml");
  writeFileSync(
    base,
    [
      "trainer: {project_name: x, experiment_name: y, total_training_steps: 10, n_gpus_per_node: 1}",
      "critic: {ppo_mini_batch_size: 4, optim: {lr: 1.0e-5}}",
      "actor_rollout_ref: {actor: {ppo_mini_batch_size: 4, optim: {lr: 1.0e-6}}}",
      "micro_batch_size_per_gpu: 1",
      "",
    ].join("\n"),
  );
  // envs.yaml's visual tag, which rollgym cannot host (it renders images).
  const envs = join(dir, "envs.yaml");
  writeFileSync(
    envs,
    [
      "custom_envs:",
      "  VisualSimpleSokoban:",
      "    env_type: sokoban",
      "    max_actions_per_traj: 10",
      '    env_instruction: "You are solving the Sokoban puzzle."',
      "    max_tokens: 100",
      "    env_config: {dim_x: 6, dim_y: 6, num_boxes: 1, max_steps: 100, search_depth: 10, render_mode: rgb_array}",
      "",
    ].join("\n"),
  );

  it("trainer-only keys are one line, counted by section", async () => {
    const r = await runInProcess([...SMALL, "--config", base]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stderr.split("\n").filter((l) => l.includes("trainer-only"));
    expect(lines).toEqual([
      "rollgym: ignoring 9 trainer-only keys: trainer.* (4), critic.* (2), actor_rollout_ref.actor.* (2), micro_batch_size_per_gpu (1)",
    ]);
  });

  it("an envs.yaml entry rollgym cannot host is skipped, saying how to drop it, unless a mode plays it", async () => {
    const r = await runInProcess([...SMALL, "--config", envs]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(
      'skipping custom_envs.VisualSimpleSokoban, which no mode plays: custom_envs.VisualSimpleSokoban.env_config.render_mode: "rgb_array" is not one of text',
    );
    expect(r.stderr).toContain("add the override ~custom_envs.VisualSimpleSokoban");
    const dropped = await runInProcess([...SMALL, "--config", envs, "~custom_envs.VisualSimpleSokoban"]);
    expect(dropped.stderr).not.toContain("skipping");
    expectUsageError(await runInProcess(["rollout", "--config", envs, "--tag", "VisualSimpleSokoban"]), [
      "custom_envs.VisualSimpleSokoban.env_config.render_mode",
    ]);
  });
});

describe.concurrent("no wrong picture", () => {
  it("show and export say how long a token-mode episode's token log is and whether it drifted", async () => {
    const engine = await startMockEngine({ model: "m" });
    try {
      const out = join(dir, "tokens.jsonl");
      const r = await runInProcess([...SMALL, "--llm", engine.url, "--model", "m", "--tokens", "--out", out]);
      expect(r.code, r.stderr).toBe(0);
      const line =
        /^tokens: \d+ ids \(\d+ first prompt, \d+ sampled, \d+ inserted\) · prompt drift 0 request\(s\) · template drift none$/m;
      expect((await runInProcess(["show", out])).stdout).toMatch(line);
      const html = (await runInProcess(["export", out])).stdout;
      expect(html.match(/<p class="muted">tokens: \d+ ids/g)).toHaveLength(4);
    } finally {
      await engine.close();
    }
  });

  it("a plugin with import/export in an `npm init -y` project (type commonjs) is explained; .mts loads", async () => {
    const project = mkdtempSync(join(tmpdir(), "rollgym-commonjs-"));
    writeFileSync(join(project, "package.json"), '{ "name": "fresh", "type": "commonjs" }\n');
    const source = readFileSync(join(ROOT, "examples", "number-line.ts"), "utf8").replaceAll(
      '"../envs/',
      `"${join(ROOT, "envs")}/`,
    );
    writeFileSync(join(project, "line.ts"), source);
    writeFileSync(join(project, "line.mts"), source);
    const run = (plugin: string) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(
          process.execPath,
          [join(ROOT, "src/cli/main.ts"), "envs", "check", "NumberLine", "--plugin", plugin],
          {
            cwd: project,
          },
        );
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d) => (stdout += d));
        child.stderr.on("data", (d) => (stderr += d));
        child.on("close", (code) => resolve({ code, stdout, stderr }));
      });
    expectUsageError(await run("./line.ts"), ['says "type": "commonjs"', "name it line.mts"]);
    const mts = await run("./line.mts");
    expect(mts.code, mts.stderr).toBe(0);
    // The docs' walk-through saves its env as .mts, so it loads in such a project.
    expect(readFileSync(join(ROOT, "docs", "environments.md"), "utf8")).toContain("--plugin ./corridor.mts");
  });

  it("a typo in a tag, a choice or an option gets a did-you-mean; a far-off word gets none", async () => {
    const cases: [string[], string][] = [
      [["rollout", "--tag", "CoordSokobn"], 'unknown tag "CoordSokobn" (did you mean "CoordSokoban"?)'],
      [["envs", "sample", "frozenlake", "--seeds", "1"], '(did you mean "FrozenLake"?)'],
      [["filter", "--strategy", "top-k"], '(did you mean "top_k"?)'],
      [["rollout", "--grups", "2"], "unknown option --grups (did you mean --groups?)"],
    ];
    for (const [argv, message] of cases) expectUsageError(await runInProcess(argv, "[[1]]"), [message]);
    const far = await runInProcess(["rollout", "--tag", "Banana"]);
    expect(far.stderr).toContain('unknown tag "Banana"; known tags:');
  });

  it("top_k with a value of 1 or more (a count, not RAGEN's fraction) is pointed out", async () => {
    const groups = "[[1,2],[3,3],[0,5]]";
    const count = await runInProcess(["filter", "--strategy", "top_k", "--value", "2"], groups);
    expect(count.code).toBe(0);
    expect(JSON.parse(count.stdout).kept).toEqual([0, 1, 2]);
    expect(count.stderr).toContain("--value 2 with top_k keeps every group: RAGEN's top_k keeps a fraction");
    expect(count.stderr).toContain("top_k_abs");
    const fraction = await runInProcess(["filter", "--strategy", "top_k", "--value", "0.5"], groups);
    expect(fraction.stderr).toBe("");
    const rollout = await runInProcess([...SMALL, "--strategy", "top_k", "--value", "3"]);
    expect(rollout.code, rollout.stderr).toBe(0);
    expect(rollout.stderr).toContain("--value (actor_rollout_ref.rollout.rollout_filter_value) 3 with top_k");
  });

  it("--llm without /v1 says to add /v1 instead of a bare 404", async () => {
    const engine = await startMockEngine({ model: "m" });
    try {
      const root = engine.url.replace(/\/v1$/, "");
      const r = await runInProcess([
        "rollout",
        "--llm",
        root,
        "--model",
        "m",
        "--tag",
        "Bandit",
        "--groups",
        "1",
      ]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `HTTP 404: Not Found at ${root}/models; the OpenAI API answers at ${root}/v1: use --llm ${root}/v1`,
      );
    } finally {
      await engine.close();
    }
  });

  it("the oracle refuses an env without a solver instead of playing random moves under its name", async () => {
    const args = ["rollout", "--plugin", "examples/number-line.ts", "--tag", "NumberLine", "--groups", "2"];
    expectUsageError(await runInProcess(args), [
      "--policy oracle",
      "NumberLine (env type number_line) has none",
      "allowed: --policy random",
    ]);
    const random = await runInProcess([...args, "--policy", "random", "--json"]);
    expect(random.code, random.stderr).toBe(0);
    // The library refuses too: runBatch with the oracle on such a tag.
    const registry = createRegistry();
    registerNumberLine(registry);
    const request = defaultBatchRequest("train", { tags: [{ tag: "NumberLine", groups: 1 }], groupSize: 2 });
    await expect(runBatch(registry, request, oraclePolicy())).rejects.toThrow("has none");
  });

  it("an interrupted run's file exports (HTML, SVG) and shows its partial groups, not an empty batch", async () => {
    const path = join(dir, "interrupted.jsonl");
    // Three groups of four; seven episodes finished: group 0 whole, group 1 partial (3 of 4).
    await writeInterruptedEpisodes(path, [{ tag: "SimpleSokoban", groups: 3 }], 4, 7);
    const html = await runInProcess(["export", path]);
    expect(html.code, html.stderr).toBe(0);
    expect(html.stdout.match(/<summary>Episode #/g)).toHaveLength(7);
    expect(html.stdout.match(/<h2>Group \d/g)).toHaveLength(2);
    expect(html.stdout).toContain("partial, interrupted after 3 episodes");
    expect(html.stdout).toContain("filter score: what the group filter ranked the group by");
    const svg = await runInProcess(["export", path, "--format", "svg", "--group", "1"]);
    expect(svg.code, svg.stderr).toBe(0);
    expect(svg.stdout.match(/font-weight="bold">#\d+ · group 1/g)).toHaveLength(3);
    const show = await runInProcess(["show", path]);
    expect(show.stdout).toContain("interrupted by SIGINT (1 group partial");
  });
});
