// `rollgym demo` (what `npm start` runs for now): sample a puzzle per env family, solve it,
// and play the solution, printing what the model would see.
import { pyNumberRepr } from "../../envs/pyrepr.ts";
import { firstTurnMessages } from "../rollout/prompt.ts";
import { type FlagSpec, parseSeed } from "./args.ts";
import { CONFIG_FLAGS, reportLoaded } from "./context.ts";
import { lookupLocalTag, parseWithSetup } from "./envs.ts";
import { io } from "./io.ts";

const DEFAULT_TAGS = ["CoordSokoban", "FrozenLake", "Bandit"];

export const DEMO_FLAGS: Record<string, FlagSpec> = {
  tag: { kind: "value", arg: "TAG", help: "play only this tag" },
  seed: { kind: "value", arg: "N", help: "the seed to play (default 10000, RAGEN's first training seed)" },
  prompt: { kind: "switch", help: "also print the first-turn system and user messages" },
  ...CONFIG_FLAGS,
};

export async function demoCommand(argv: readonly string[]): Promise<void> {
  const { args, loaded, registry } = await parseWithSetup("demo", argv, DEMO_FLAGS, []);
  const tagNames = args.values.has("tag") ? [args.values.get("tag")!] : DEFAULT_TAGS;
  const tags = tagNames.map((name) => lookupLocalTag("demo", registry, name));
  const seedText = args.values.get("seed");
  const seed = seedText === undefined ? 10000 : parseSeed("--seed", seedText);
  reportLoaded(loaded);

  const lines: string[] = ["rollgym environment demo: sample, solve and play RAGEN's puzzles", ""];
  for (const tag of tags) {
    const env = tag.make();
    const observation = env.reset(seed);
    lines.push(`== ${tag.spec.tag} (env type ${tag.spec.env_type}), seed ${seed}`);
    if (args.switches.has("prompt")) {
      for (const m of firstTurnMessages(tag, observation, { think: true }))
        lines.push(`-- ${m.role}:`, m.content);
    }
    lines.push(observation, "");
    const solution = tag.solve(env);
    const actions = solution?.actions ?? [];
    let summary = `solution: ${actions.length ? actions.join(", ") : "none found"}`;
    if (solution?.successProbability !== undefined) {
      summary += ` (an optimal policy succeeds with probability ${solution.successProbability.toFixed(3)} within ${tag.spec.max_actions_per_traj} actions on this slippery ice)`;
    }
    lines.push(summary);
    let total = 0;
    for (const name of actions) {
      const result = env.step(env.actionNames.indexOf(name) + 1);
      total += result.reward;
      lines.push(
        `> ${name}: reward ${pyNumberRepr(result.reward, tag.type.integerRewards)}${result.info.success ? ", success" : ""}`,
        result.observation,
      );
      if (result.terminated || result.truncated) break;
    }
    lines.push(`episode reward ${pyNumberRepr(total, tag.type.integerRewards)}`, "");
  }
  lines.push(
    "Next: npx rollgym envs list | npx rollgym envs sample CoordSokoban --seeds 123..130 --solve",
    "      npx rollgym envs play SimpleSokoban --seed 10000 --actions Left,Up,Up",
  );
  io().stdout.write(`${lines.join("\n")}\n`);
}
