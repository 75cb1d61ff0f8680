// Remote against in-process envs: the same batches (1,024 episodes in flight by default: 64
// groups × 16, all groups at once) played by the zero-latency random policy on an in-process
// tag and on the same tag hosted remotely (env_type openenv, one /ws session per episode), with
// a configurable step delay. Prints episodes/s, env steps/s, and the CPU per env step of this
// process (the rollout host) and of the env server (a child process, bench/openenv-env-server.ts).
// - delay 0: in process is the synchronous env; remote is rollgym's own OpenEnv server.
// - delay D > 0: in process is the env behind an asynchronous wrapper answering each step D ms
//   later (the AsyncEnv contract in process); remote is a minimal OpenEnv server answering each
//   step D ms later.
// Usage: node bench/openenv.ts [--tag T] [--groups N] [--group-size N] [--batches N]
//          [--warmup N] [--step-delay-ms 0,10] [--json FILE]
// Each row first plays --warmup unmeasured batches (the first row read low without them).
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import type { EnvRegistry } from "../envs/registry.ts";
import type { AsyncEnv, EnvType, StepResult } from "../envs/types.ts";
import { buildRegistry } from "../src/cli/build-registry.ts";
import { defaultConfig } from "../src/config/index.ts";
import { applyCustomEnvs } from "../src/config/registry.ts";
import { randomPolicy } from "../src/llm/builtin.ts";
import { runBatch } from "../src/rollout/batch.ts";
import { defaultBatchRequest } from "../src/rollout/request.ts";

const { values } = parseArgs({
  options: {
    tag: { type: "string", default: "CoordFrozenLake" },
    groups: { type: "string", default: "64" },
    "group-size": { type: "string", default: "16" },
    batches: { type: "string", default: "3" },
    warmup: { type: "string", default: "2" },
    "step-delay-ms": { type: "string", default: "0,10" },
    json: { type: "string" },
  },
});
const positive = (flag: string, text: string | undefined): number => {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag}: ${text} is not a positive integer`);
  return n;
};
const tag = values.tag!;
const groups = positive("groups", values.groups);
const groupSize = positive("group-size", values["group-size"]);
const batches = positive("batches", values.batches);
const warmup = Number(values.warmup);
if (!Number.isInteger(warmup) || warmup < 0)
  throw new Error(`--warmup: ${values.warmup} is not an integer ≥ 0`);
const delays = values["step-delay-ms"]!.split(",").map((d) => {
  const n = Number(d);
  if (!(n >= 0)) throw new Error(`--step-delay-ms: ${d} is not a number ≥ 0`);
  return n;
});

interface Row {
  env: "in-process" | "remote";
  step_delay_ms: number;
  episodes: number;
  episodes_per_s: number;
  steps_per_s: number;
  /** CPU of this process (rollout host) per env step, µs. */
  host_cpu_us_per_step: number;
  /** CPU of the env server process per env step, µs (remote only). */
  env_server_cpu_us_per_step: number | null;
  failed: number;
}

/** An in-process env whose steps answer `delayMs` later (the AsyncEnv contract, in process). */
function delayedType(base: EnvType<object>, delayMs: number): EnvType<object> {
  return {
    ...base,
    name: "delayed",
    open(config): AsyncEnv {
      const env = base.create(config);
      return {
        reset: (seed) => env.reset(seed),
        step: (action) =>
          new Promise<StepResult>((resolve) => {
            const result = env.step(action as number);
            setTimeout(() => resolve(result), delayMs);
          }),
        render: () => env.render(),
        get actionNames() {
          return env.actionNames;
        },
        get done() {
          return env.done;
        },
      };
    },
  };
}

/** Adds `name` to the registry as a custom_envs entry with `tag`'s spec and the given type and env_config. */
function addTag(
  registry: EnvRegistry,
  name: string,
  envType: string,
  envConfig: Record<string, unknown>,
): void {
  const config = defaultConfig();
  const spec = registry.tag(tag).spec;
  config.custom_envs = {
    [name]: {
      env_type: envType,
      max_actions_per_traj: spec.max_actions_per_traj,
      env_instruction: spec.env_instruction,
      max_tokens: spec.max_tokens,
      env_config: envConfig,
    },
  } as never;
  applyCustomEnvs(registry, config);
}

async function startEnvServer(args: string[]): Promise<{ child: ChildProcess; base: string }> {
  const child = spawn(process.execPath, ["bench/openenv-env-server.ts", ...args], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const base = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`env server exited (${code})`)));
  });
  return { child, base };
}

/** User + system CPU of a process, µs (Linux /proc; clock ticks of 10 ms). */
function processCpuUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

async function measure(
  registry: EnvRegistry,
  tagName: string,
  env: Row["env"],
  delayMs: number,
  server: ChildProcess | null,
): Promise<Row> {
  const request = (seed: number) =>
    defaultBatchRequest("train", { tags: [{ tag: tagName, groups }], groupSize, seed });
  const policy = randomPolicy();
  // Warm-up: the JIT, the heap's growth, the remote pool's seed check, the server's first sessions.
  for (let w = 0; w < warmup; w++)
    await runBatch(registry, request(1_000_000 + w * groups), policy, { retainEpisodes: false });
  const cpu = process.cpuUsage();
  const serverCpu = server ? processCpuUs(server.pid!) : 0;
  const start = performance.now();
  let episodes = 0;
  let steps = 0;
  let failed = 0;
  for (let b = 0; b < batches; b++) {
    const result = await runBatch(registry, request(b * groups), policy, { maxConcurrentGroups: groups });
    episodes += result.episodes.length;
    steps += result.episodes.reduce((n, e) => n + e.num_actions, 0);
    failed += result.failed;
  }
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  return {
    env,
    step_delay_ms: delayMs,
    episodes,
    episodes_per_s: episodes / seconds,
    steps_per_s: steps / seconds,
    host_cpu_us_per_step: (used.user + used.system) / steps,
    env_server_cpu_us_per_step: server ? (processCpuUs(server.pid!) - serverCpu) / steps : null,
    failed,
  };
}

const load = loadavg()[0];
console.log(
  `${tag}: ${groups} groups × ${groupSize} = ${groups * groupSize} episodes in flight, ${batches} batches; load average ${load.toFixed(2)}`,
);
const rows: Row[] = [];
for (const delayMs of delays) {
  const registry = await buildRegistry(defaultConfig());
  let local = tag;
  if (delayMs > 0) {
    registry.registerType(delayedType(registry.envType(registry.tag(tag).spec.env_type)!, delayMs));
    local = `${tag}InProcessDelayed`;
    addTag(registry, local, "delayed", registry.tag(tag).spec.env_config ?? {});
  }
  rows.push(await measure(registry, local, "in-process", delayMs, null));

  const { child, base } = await startEnvServer(
    delayMs > 0 ? ["--server", "delayed", "--tag", tag, "--step-delay-ms", String(delayMs)] : ["--tag", tag],
  );
  try {
    addTag(registry, `${tag}Remote`, "openenv", {
      url: base,
      max_sessions: groups * groupSize,
      step_timeout_s: 120,
    });
    rows.push(await measure(registry, `${tag}Remote`, "remote", delayMs, child));
  } finally {
    child.kill();
  }
}

const fmt = (n: number | null, digits = 0) =>
  n === null ? "—" : n.toLocaleString("en", { maximumFractionDigits: digits });
console.log("env         delay ms  episodes/s  steps/s   host CPU µs/step  env server CPU µs/step  failed");
for (const r of rows)
  console.log(
    `${r.env.padEnd(11)} ${String(r.step_delay_ms).padStart(8)}  ${fmt(r.episodes_per_s).padStart(10)}  ${fmt(r.steps_per_s).padStart(7)}  ${fmt(r.host_cpu_us_per_step, 1).padStart(16)}  ${fmt(r.env_server_cpu_us_per_step, 1).padStart(22)}  ${r.failed}`,
  );
if (values.json)
  writeFileSync(
    values.json,
    `${JSON.stringify({ tag, groups, group_size: groupSize, batches, load_average: load, rows }, null, 2)}\n`,
  );
