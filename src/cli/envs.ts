// `rollgym envs list|sample|play|prompt`: the environments, from the command line.
import { createRegistry } from "../../envs/catalog.ts";
import { checkConformance } from "../../envs/conformance.ts";
import type { ResolvedTag } from "../../envs/registry.ts";
import { mapActions } from "../rollout/parse.ts";
import { firstTurnMessages } from "../rollout/prompt.ts";
import { expectPositionals, parseArgs, parseSeed, parseSeedRange, UsageError } from "./args.ts";
import { LineWriter, ProgressBar } from "./output.ts";

const registry = createRegistry();

export function lookupTag(command: string, name: string): ResolvedTag {
  if (!registry.hasTag(name)) {
    throw new UsageError(
      `${command}: unknown tag ${JSON.stringify(name)}; known tags: ${registry.tagNames().join(", ")}`,
    );
  }
  return registry.tag(name);
}

export async function envsList(argv: readonly string[]): Promise<void> {
  const args = parseArgs("envs list", argv, {});
  expectPositionals("envs list", args, []);
  const out = new LineWriter();
  for (const name of registry.tagNames()) {
    const tag = registry.tag(name);
    await out.line({ tag: name, env_type: tag.spec.env_type, config: tag.config });
  }
  await out.flush();
}

export async function envsSample(argv: readonly string[]): Promise<void> {
  const command = "envs sample";
  const args = parseArgs(command, argv, {
    seeds: { kind: "value", help: "a seed N or an inclusive range A..B" },
    solve: { kind: "switch", help: "add a shortest solution" },
  });
  const [tagName] = expectPositionals(command, args, ["TAG"]);
  const tag = lookupTag(command, tagName);
  const seedsText = args.values.get("seeds");
  if (seedsText === undefined) throw new UsageError(`${command}: --seeds is required (N or A..B)`);
  const [first, last] = parseSeedRange("--seeds", seedsText);
  const solve = args.switches.has("solve");

  const out = new LineWriter();
  const progress = new ProgressBar(`sampling ${tagName}`, last - first + 1, "seeds");
  const env = tag.make();
  for (let seed = first; seed <= last; seed++) {
    const observation = env.reset(seed);
    const line: Record<string, unknown> = { tag: tagName, seed, observation };
    if (solve) {
      const solution = tag.solve(env);
      line.solution = solution?.actions ?? null;
      if (solution?.successProbability !== undefined) line.success_probability = solution.successProbability;
    }
    await out.line(line);
    progress.tick();
  }
  await out.flush();
  progress.done();
}

export async function envsPlay(argv: readonly string[]): Promise<void> {
  const command = "envs play";
  const args = parseArgs(command, argv, {
    seed: { kind: "value", help: "the seed to reset with" },
    actions: { kind: "value", help: "comma-separated action names, e.g. Up,Left" },
  });
  const [tagName] = expectPositionals(command, args, ["TAG"]);
  const tag = lookupTag(command, tagName);
  const seedText = args.values.get("seed");
  if (seedText === undefined) throw new UsageError(`${command}: --seed is required`);
  const seed = parseSeed("--seed", seedText);
  const actionsText = args.values.get("actions");
  if (actionsText === undefined) throw new UsageError(`${command}: --actions is required (e.g. Up,Left)`);

  const env = tag.make();
  env.reset(seed);
  // Validate every name before stepping, so a typo late in the list prints nothing.
  const names = actionsText.split(",").map((name) => name.trim());
  const ids = names.map((name) => {
    const mapped = mapActions([name], env.actionNames);
    if (mapped.ids.length !== 1) {
      throw new UsageError(
        `--actions: unknown action ${JSON.stringify(name)} for ${tagName} seed ${seed}; allowed: ${env.actionNames.join(", ")}`,
      );
    }
    return mapped.ids[0];
  });

  const out = new LineWriter();
  for (const id of ids) {
    const result = env.step(id);
    const done = result.terminated || result.truncated;
    await out.line({
      action: env.actionNames[id - 1],
      reward: result.reward,
      done,
      success: result.info.success,
      effective: result.info.action_is_effective,
      observation: result.observation,
    });
    if (done) break;
  }
  await out.flush();
}

export async function envsPrompt(argv: readonly string[]): Promise<void> {
  const command = "envs prompt";
  const args = parseArgs(command, argv, {
    seed: { kind: "value", help: "the seed to reset with" },
    "no-think": { kind: "switch", help: "ask for <answer> only (RAGEN's enable_think=False)" },
    "ragen-vocabulary": {
      kind: "switch",
      help: "print the env type's default symbols and actions, as RAGEN does",
    },
  });
  const [tagName] = expectPositionals(command, args, ["TAG"]);
  const tag = lookupTag(command, tagName);
  const seedText = args.values.get("seed");
  if (seedText === undefined) throw new UsageError(`${command}: --seed is required`);
  const seed = parseSeed("--seed", seedText);
  const messages = firstTurnMessages(tag, tag.make().reset(seed), {
    think: !args.switches.has("no-think"),
    ragenDefaultVocabulary: args.switches.has("ragen-vocabulary"),
  });
  const out = new LineWriter();
  await out.line({ messages });
  await out.flush();
}

export async function envsCheck(argv: readonly string[]): Promise<void> {
  const command = "envs check";
  const args = parseArgs(command, argv, {});
  const names = args.positionals.length ? args.positionals : registry.tagNames();
  const tags = names.map((name) => lookupTag(command, name));
  const out = new LineWriter();
  let failed = 0;
  for (const tag of tags) {
    const checks = checkConformance(tag);
    failed += checks.filter((c) => !c.ok).length;
    await out.line({ tag: tag.spec.tag, ok: checks.every((c) => c.ok), checks });
  }
  await out.flush();
  if (failed > 0) process.exitCode = 1;
}
