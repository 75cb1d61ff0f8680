// The in-process env path of a rollout, without a model: episodes built (reset) and turns
// applied (parse, map, step, record) as batch.ts does, with fixed responses. Guards the cost of
// the asynchronous env contract (envs/types.ts AsyncEnv): an in-process env answers at once and
// the rollout awaits nothing for it.
// Usage: node bench/episode-steps.ts [--seconds S] [--tag T] [--json FILE]
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createRegistry } from "../envs/catalog.ts";
import { Episode } from "../src/rollout/episode.ts";
import { defaultBatchRequest } from "../src/rollout/request.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    tag: { type: "string", default: "CoordFrozenLake" },
    json: { type: "string" },
  },
});
const seconds = Number(values.seconds);
if (!(seconds > 0)) throw new Error(`--seconds: ${values.seconds} is not a positive number`);
const tag = createRegistry().tag(values.tag!);
const settings = defaultBatchRequest("train").episode;

/**
 * Plays episodes from consecutive seeds until the deadline: turns and episodes per second of
 * wall time, and turns per second of this process's CPU time (steadier on a shared machine).
 */
function run(forSeconds: number): { turns_per_s: number; episodes_per_s: number; turns_per_cpu_s: number } {
  const names = tag.make().actionNames;
  let turns = 0;
  let episodes = 0;
  const cpu = process.cpuUsage();
  const start = performance.now();
  const deadline = start + forSeconds * 1000;
  for (let seed = 0; performance.now() < deadline; seed++) {
    const episode = new Episode(tag, seed, 0, seed, settings);
    while (episode.active) {
      const name = names[(seed + turns) % names.length];
      episode.applyResponse(`<think>go</think><answer>${name} || ${name}</answer>`, "stop");
      turns++;
    }
    episode.record();
    episodes++;
  }
  const elapsed = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  return {
    turns_per_s: turns / elapsed,
    episodes_per_s: episodes / elapsed,
    turns_per_cpu_s: turns / ((used.user + used.system) / 1e6),
  };
}

run(Math.min(1, seconds / 3)); // warm-up: the JIT compiles before timing starts
const result = { tag: values.tag, ...run(seconds) };
console.log(
  `${result.tag}: ${Math.round(result.turns_per_s).toLocaleString("en")} turns/s, ${Math.round(result.episodes_per_s).toLocaleString("en")} episodes/s, ${Math.round(result.turns_per_cpu_s).toLocaleString("en")} turns per CPU second`,
);
if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
