// Environment micro-benchmarks: resets/s and steps/s per tag on one core (one thread).
// Usage: node bench/envs.ts [--seconds S] [--warmup S] [--tags A,B] [--json FILE]
// Resets use consecutive seeds from 0; steps play uniformly random actions, resetting when
// an episode ends (the reset time is excluded from steps/s). Each tag first runs the same
// loops unmeasured for --warmup seconds, so the JIT has compiled its code before timing starts
// (without it the first tag read low).
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createRegistry } from "../envs/catalog.ts";
import { PythonRandom } from "../envs/rng/python-random.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "2" },
    warmup: { type: "string", default: "0.5" },
    tags: { type: "string" },
    json: { type: "string" },
  },
});
const seconds = Number(values.seconds);
if (!(seconds > 0)) throw new Error(`--seconds: ${values.seconds} is not a positive number`);
const warmup = Number(values.warmup);
if (!(warmup >= 0)) throw new Error(`--warmup: ${values.warmup} is not a number ≥ 0`);
const registry = createRegistry();
const tags = values.tags ? values.tags.split(",") : registry.tagNames();

interface Row {
  tag: string;
  resets_per_s: number;
  steps_per_s: number;
}

function measureResets(tag: string, forSeconds: number): number {
  const env = registry.tag(tag).make();
  let seed = 0;
  const start = performance.now();
  const deadline = start + forSeconds * 1000;
  while (performance.now() < deadline) for (let i = 0; i < 32; i++) env.reset(seed++);
  return seed / ((performance.now() - start) / 1000);
}

function measureSteps(tag: string, forSeconds: number): number {
  const env = registry.tag(tag).make();
  const rng = new PythonRandom(7);
  let seed = 0;
  let steps = 0;
  let stepTime = 0;
  env.reset(seed++);
  const deadline = performance.now() + forSeconds * 1000;
  while (performance.now() < deadline) {
    const t0 = performance.now();
    let n = 0;
    while (n < 256 && !env.done) {
      env.step(rng.randbelow(env.actionNames.length) + 1);
      n++;
    }
    stepTime += performance.now() - t0;
    steps += n;
    if (env.done) env.reset(seed++);
  }
  return steps / (stepTime / 1000);
}

const rows: Row[] = [];
process.stderr.write(`node ${process.version}, ${seconds} s per measurement after ${warmup} s of warm-up\n`);
for (const tag of tags) {
  // Each loop runs unmeasured right before it is measured, so each is timed compiled.
  if (warmup > 0) measureResets(tag, warmup);
  const resets = measureResets(tag, seconds);
  if (warmup > 0) measureSteps(tag, warmup);
  rows.push({ tag, resets_per_s: resets, steps_per_s: measureSteps(tag, seconds) });
  process.stderr.write(`measured ${tag}\n`);
}
const fmt = (x: number) => Math.round(x).toLocaleString("en-US");
const width = Math.max(...rows.map((r) => r.tag.length), 3);
const lines = [
  `${"tag".padEnd(width)}  ${"resets/s".padStart(12)}  ${"steps/s".padStart(12)}`,
  ...rows.map(
    (r) => `${r.tag.padEnd(width)}  ${fmt(r.resets_per_s).padStart(12)}  ${fmt(r.steps_per_s).padStart(12)}`,
  ),
];
process.stdout.write(`${lines.join("\n")}\n`);
if (values.json) {
  writeFileSync(
    values.json,
    `${JSON.stringify({ node: process.version, seconds, warmup, rows }, null, 2)}\n`,
  );
}
