// `rollgym envs list|sample|play|prompt|check`: the environments, from the command line. Each
// takes --config/--plugin/key=value, so tags added by plugins or custom_envs work the same.
import { checkConformance } from "../../envs/conformance.ts";
import { type EnvRegistry, type ResolvedTag, unknownTagMessage } from "../../envs/registry.ts";
import { mapActions } from "../rollout/parse.ts";
import { firstTurnMessages } from "../rollout/prompt.ts";
import {
  expectPositionals,
  type FlagSpec,
  type ParsedArgs,
  parseArgs,
  parseSeed,
  parseSeedRange,
  UsageError,
} from "./args.ts";
import { CONFIG_FLAGS, isOverride, reportLoaded, type Setup, setup } from "./context.ts";
import { io } from "./io.ts";
import { LineWriter, PRETTY_FLAG, ProgressBar } from "./output.ts";
import { playInteractive } from "./play.ts";

export function lookupTag(command: string, registry: EnvRegistry, name: string): ResolvedTag {
  if (!registry.hasTag(name)) {
    throw new UsageError(`${command}: ${unknownTagMessage(name, registry.tagNames())}`);
  }
  return registry.tag(name);
}

/** A tag whose env `command` steps in process: a remote tag (env_type openenv) is refused. */
export function lookupLocalTag(command: string, registry: EnvRegistry, name: string): ResolvedTag {
  const tag = lookupTag(command, registry, name);
  if (tag.type.open)
    throw new UsageError(
      `${command}: ${name} runs in another process (env_type ${tag.spec.env_type}), and ${command} ` +
        "steps envs in process; roll it out (rollgym rollout, rollgym serve), check it (rollgym envs check) " +
        "or see its first prompt (rollgym envs prompt)",
    );
  return tag;
}

/** Parses a command that takes config flags; key=value positionals are config overrides. */
export async function parseWithSetup(
  command: string,
  argv: readonly string[],
  flags: Record<string, FlagSpec>,
  names: readonly string[] | null,
): Promise<{ args: ParsedArgs; positionals: string[] } & Setup> {
  const args = parseArgs(command, argv, flags);
  const overrides = args.positionals.filter(isOverride);
  const rest = args.positionals.filter((p) => !isOverride(p));
  const positionals =
    names === null ? rest : expectPositionals(command, { ...args, positionals: rest }, names);
  return { args, positionals, ...(await setup(args, overrides)) };
}

export const LIST_FLAGS: Record<string, FlagSpec> = { ...CONFIG_FLAGS, ...PRETTY_FLAG };

export async function envsList(argv: readonly string[]): Promise<void> {
  const { args, loaded, registry } = await parseWithSetup("envs list", argv, LIST_FLAGS, []);
  reportLoaded(loaded);
  const out = new LineWriter(args.switches.has("pretty"));
  for (const name of registry.tagNames()) {
    const tag = registry.tag(name);
    await out.line({ tag: name, env_type: tag.spec.env_type, config: tag.config });
  }
  await out.flush();
}

export const SAMPLE_FLAGS: Record<string, FlagSpec> = {
  seeds: { kind: "value", arg: "A..B", help: "a seed N or an inclusive range A..B (seeds in [0, 2^32))" },
  solve: { kind: "switch", help: "add a shortest solution (and FrozenLake's success probability)" },
  ...CONFIG_FLAGS,
  ...PRETTY_FLAG,
};

export async function envsSample(argv: readonly string[]): Promise<void> {
  const command = "envs sample";
  const { args, positionals, loaded, registry } = await parseWithSetup(command, argv, SAMPLE_FLAGS, ["TAG"]);
  const [tagName] = positionals;
  const tag = lookupLocalTag(command, registry, tagName);
  const seedsText = args.values.get("seeds");
  if (seedsText === undefined) throw new UsageError(`${command}: --seeds is required (N or A..B)`);
  const [first, last] = parseSeedRange("--seeds", seedsText);
  const solve = args.switches.has("solve");
  reportLoaded(loaded);

  const out = new LineWriter(args.switches.has("pretty"));
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

export const PLAY_FLAGS: Record<string, FlagSpec> = {
  seed: { kind: "value", arg: "N", help: "the seed to reset with" },
  actions: {
    kind: "value",
    arg: "A,B,…",
    help: "comma-separated action names, e.g. Up,Left; without it a terminal gets an interactive game",
  },
  ...CONFIG_FLAGS,
  ...PRETTY_FLAG,
};

export async function envsPlay(argv: readonly string[]): Promise<void> {
  const command = "envs play";
  const { args, positionals, loaded, registry } = await parseWithSetup(command, argv, PLAY_FLAGS, ["TAG"]);
  const [tagName] = positionals;
  const tag = lookupLocalTag(command, registry, tagName);
  const seedText = args.values.get("seed");
  if (seedText === undefined) throw new UsageError(`${command}: --seed is required`);
  const seed = parseSeed("--seed", seedText);
  const actionsText = args.values.get("actions");
  if (actionsText === undefined) {
    const { stdin, stdout } = io();
    if (!stdin.isTTY || !stdout.isTTY || !stdin.setRawMode) {
      throw new UsageError(
        `${command}: --actions is required when stdin and stdout are not a terminal (e.g. --actions Up,Left)`,
      );
    }
    reportLoaded(loaded);
    await playInteractive(tag, seed);
    return;
  }

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
  reportLoaded(loaded);

  const out = new LineWriter(args.switches.has("pretty"));
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

export const PROMPT_FLAGS: Record<string, FlagSpec> = {
  seed: { kind: "value", arg: "N", help: "the seed to reset with" },
  "no-think": { kind: "switch", help: "ask for <answer> only (RAGEN's enable_think=False)" },
  "ragen-vocabulary": {
    kind: "switch",
    help: "print the env type's default symbols and actions, as RAGEN does",
  },
  ...CONFIG_FLAGS,
  ...PRETTY_FLAG,
};

export async function envsPrompt(argv: readonly string[]): Promise<void> {
  const command = "envs prompt";
  const { args, positionals, loaded, registry } = await parseWithSetup(command, argv, PROMPT_FLAGS, ["TAG"]);
  const tag = lookupTag(command, registry, positionals[0]);
  const seedText = args.values.get("seed");
  if (seedText === undefined) throw new UsageError(`${command}: --seed is required`);
  const seed = parseSeed("--seed", seedText);
  const agent = loaded.config.agent_proxy;
  reportLoaded(loaded);
  // Opened as a rollout opens it, so a remote tag's first observation comes from its server.
  const env = tag.open();
  let observation: string;
  try {
    observation = await env.reset(seed);
  } finally {
    env.close?.();
  }
  const messages = firstTurnMessages(tag, observation, {
    think: agent.enable_think && !args.switches.has("no-think"),
    actionSep: agent.action_sep,
    ragenDefaultVocabulary: args.switches.has("ragen-vocabulary"),
  });
  const out = new LineWriter(args.switches.has("pretty"));
  await out.line({ messages });
  await out.flush();
}

export const CHECK_FLAGS: Record<string, FlagSpec> = { ...CONFIG_FLAGS, ...PRETTY_FLAG };

export async function envsCheck(argv: readonly string[]): Promise<number> {
  const command = "envs check";
  const { args, positionals, loaded, registry } = await parseWithSetup(command, argv, CHECK_FLAGS, null);
  const names = positionals.length ? positionals : registry.tagNames();
  const tags = names.map((name) => lookupTag(command, registry, name));
  reportLoaded(loaded);
  const out = new LineWriter(args.switches.has("pretty"));
  let failed = 0;
  for (const tag of tags) {
    const checks = await checkConformance(tag);
    failed += checks.filter((c) => !c.ok).length;
    await out.line({ tag: tag.spec.tag, ok: checks.every((c) => c.ok), checks });
  }
  await out.flush();
  return failed > 0 ? 1 : 0;
}
