// A custom env type written outside envs/ (examples/number-line.ts), loaded with --plugin (or
// rollgym.plugins) and used from the command line: sampled, played, checked, rolled out and
// served.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { expectUsageError, jsonLines, ROOT, rollgym, spawnServe } from "../helpers/cli.ts";
import { TestClient } from "../helpers/ws-client.ts";

const PLUGIN = ["--plugin", "examples/number-line.ts"];

/** A new directory outside the checkout holding my-env.ts, a plugin (the example, re-exported). */
function pluginDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "rollgym-plugin-"));
  const example = pathToFileURL(join(ROOT, "examples", "number-line.ts")).href;
  writeFileSync(join(dir, "my-env.ts"), `export { register } from ${JSON.stringify(example)};\n`);
  return dir;
}

describe.concurrent("custom env types through --plugin", () => {
  it("envs list, sample, play, prompt and check see the plugin's tag", async () => {
    const list = await rollgym(["envs", "list", ...PLUGIN]);
    expect(jsonLines(list.stdout).at(-1)).toEqual({
      tag: "NumberLine",
      env_type: "number_line",
      config: { length: 9 },
    });
    const sample = jsonLines(
      (await rollgym(["envs", "sample", "NumberLine", "--seeds", "1..3", ...PLUGIN])).stdout,
    );
    expect(sample.map((l) => l.seed)).toEqual([1, 2, 3]);
    for (const l of sample) expect(l.observation).toMatch(/^[_PT]{9}$/);
    const play = jsonLines(
      (await rollgym(["envs", "play", "NumberLine", "--seed", "1", "--actions", "Left,Right", ...PLUGIN]))
        .stdout,
    );
    expect(play[0]).toMatchObject({ action: "Left" });
    const prompt = JSON.parse(
      (await rollgym(["envs", "prompt", "NumberLine", "--seed", "1", ...PLUGIN])).stdout,
    );
    expect(prompt.messages[0].content).toContain("Move onto the target.");
    const check = await rollgym(["envs", "check", "NumberLine", ...PLUGIN]);
    expect(check.code).toBe(0);
    expect(jsonLines(check.stdout)[0]).toMatchObject({ tag: "NumberLine", ok: true });
  });

  it("rollout plays the plugin's tag, also when a config file names the plugin", async () => {
    const r = await rollgym([
      "rollout",
      "--tag",
      "NumberLine",
      "--groups",
      "3",
      "--group-size",
      "4",
      "--policy",
      "random",
      "--json",
      ...PLUGIN,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout) as { episodes: number; metrics: Record<string, number> };
    expect(summary.episodes).toBe(12);
    expect(summary.metrics).toHaveProperty(["train/NumberLine/success"]);
    // The config file names its plugin from its own directory, not the one rollgym runs in.
    const config = join(pluginDir(), "run.yaml");
    writeFileSync(
      config,
      "rollgym:\n  plugins: [./my-env.ts]\ncustom_envs:\n  NumberLine:\n    env_config:\n      length: 5\n" +
        "es_manager:\n  val:\n    env_groups: 2\n    env_configs: {tags: [NumberLine], n_groups: [2]}\n",
    );
    // NumberLine has no solver: the default oracle policy refuses it rather than play random
    // moves under its name.
    expectUsageError(await rollgym(["rollout", "--config", config, "--mode", "val"]), [
      "--policy oracle",
      "NumberLine (env type number_line) has no",
      "--policy random",
    ]);
    const val = await rollgym([
      "rollout",
      "--config",
      config,
      "--mode",
      "val",
      "--policy",
      "random",
      "--json",
    ]);
    expect(val.code, val.stderr).toBe(0);
    expect(JSON.parse(val.stdout)).toMatchObject({ episodes: 2 });
    const listed = jsonLines((await rollgym(["envs", "list", "--config", config])).stdout);
    expect(listed.find((l) => l.tag === "NumberLine")?.config).toEqual({ length: 5 });
    expectUsageError(
      await rollgym(["rollout", "--config", config, "custom_envs.NumberLine.env_config.length=1"]),
      ["custom_envs.NumberLine.env_config.length", "override"],
    );
  });

  it("serve hosts the plugin's tag: /v1/envs lists it and a rollout plays it", async () => {
    const { url, child } = await spawnServe([...PLUGIN, "--policy", "random"]);
    try {
      const envs = (await (await fetch(`${url}/v1/envs`)).json()) as { envs: { tag: string }[] };
      expect(envs.envs.map((e) => e.tag)).toContain("NumberLine");
      const client = await TestClient.connect(url);
      client.send({
        type: "rollout",
        id: "n",
        tags: [{ tag: "NumberLine", groups: 2 }],
        mode: "val",
        group_size: 2,
        delivery: "batch",
      });
      client.send({ type: "credit", groups: 100 });
      const batch = await client.next((f) => f.type === "batch" && f.rollout === "n");
      expect(batch).toMatchObject({ episodes: 4, failed: 0 });
      expect(Object.keys(batch.metrics as object)).toContain("val-env/NumberLine/success");
      client.close();
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("a server whose oracle has no solver for the tag refuses the rollout, saying why", async () => {
    const { url, child } = await spawnServe(PLUGIN);
    try {
      const client = await TestClient.connect(url);
      client.send({
        type: "rollout",
        id: "o",
        tags: [{ tag: "NumberLine", groups: 1 }],
        mode: "val",
        group_size: 2,
        delivery: "batch",
      });
      const error = await client.next((f) => f.type === "error");
      expect(error).toMatchObject({ code: "bad_frame", rollout: "o" });
      expect(error.message).toContain(
        "the server's policy oracle: the oracle policy plays each env's own solver",
      );
      client.close();
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("a config file's plugin paths start at the file; --plugin's and key=value's at the current directory", async () => {
    const dir = pluginDir();
    const config = join(dir, "run.yaml");
    writeFileSync(config, "rollgym:\n  plugins: [examples/number-line.ts]\n");
    // examples/number-line.ts is there from the current directory (the checkout), not from the file's.
    expectUsageError(await rollgym(["envs", "list", "--config", config]), [
      `rollgym.plugins (set in ${config}:2)`,
      `a path from the config file's directory, ${dir}`,
    ]);
    // (--plugin's paths are the other tests'.)
    const list = await rollgym([
      "envs",
      "list",
      "--config",
      config,
      "rollgym.plugins=examples/number-line.ts",
    ]);
    expect(list.code, list.stderr).toBe(0);
    expect(jsonLines(list.stdout).map((l) => l.tag)).toContain("NumberLine");
  });

  it("a plugin that cannot be loaded or registers nothing is one line naming it", async () => {
    expectUsageError(await rollgym(["envs", "list", "--plugin", "no/such/plugin.ts"]), [
      "--plugin",
      "no/such/plugin.ts",
    ]);
    expectUsageError(await rollgym(["envs", "list", "--plugin", "README.md"]), ["--plugin", "README.md"]);
    expectUsageError(await rollgym(["rollout", "--plugin", "node:fs"]), ["--plugin", "register(registry)"]);
  });
});
