// `rollgym parse <TAG>`: how RAGEN reads one model turn — parsed actions, canonical names,
// the rebuilt response and the format-penalty decision.
import { checkField, FIELD_SPECS } from "../config/schema.ts";
import { inContext } from "../errors/boundary.ts";
import { mapActions, parseResponse } from "../rollout/parse.ts";
import { type FlagSpec, parseInteger, parseSeed } from "./args.ts";
import { CONFIG_FLAGS, reportLoaded } from "./context.ts";
import { lookupLocalTag, parseWithSetup } from "./envs.ts";
import { LineWriter, PRETTY_FLAG, readStdin } from "./output.ts";

export const PARSE_FLAGS: Record<string, FlagSpec> = {
  seed: { kind: "value", arg: "N", help: "seed whose action names apply (Bandit arm names); default 0" },
  "no-think": { kind: "switch", help: "the response opens with <answer> (RAGEN's enable_think=False)" },
  "max-actions-per-turn": {
    kind: "value",
    arg: "N",
    help: "keep at most N actions (default agent_proxy.max_actions_per_turn, 2)",
  },
  "action-sep": {
    kind: "value",
    arg: "S",
    help: `action separator (default agent_proxy.action_sep, "||")`,
  },
  ...CONFIG_FLAGS,
  ...PRETTY_FLAG,
};

/** A flag that sets a config key is checked by the config's own rule for that key. */
function configFlag(flag: string, key: string, text: string): unknown {
  try {
    return checkField(key, FIELD_SPECS[key], text);
  } catch (error) {
    throw inContext(error, "config", flag);
  }
}

export async function parseCommand(argv: readonly string[]): Promise<void> {
  const command = "parse";
  const { args, positionals, loaded, registry } = await parseWithSetup(command, argv, PARSE_FLAGS, ["TAG"]);
  const tag = lookupLocalTag(command, registry, positionals[0]);
  const seedText = args.values.get("seed");
  const seed = seedText === undefined ? 0 : parseSeed("--seed", seedText);
  const agent = loaded.config.agent_proxy;
  const maxText = args.values.get("max-actions-per-turn");
  const maxActionsPerTurn =
    maxText === undefined
      ? agent.max_actions_per_turn
      : parseInteger("--max-actions-per-turn", maxText, 1, 1000);
  const sepText = args.values.get("action-sep");
  const actionSep =
    sepText === undefined
      ? agent.action_sep
      : (configFlag("--action-sep", "agent_proxy.action_sep", sepText) as string);
  reportLoaded(loaded);

  const text = await readStdin();
  const env = tag.make();
  env.reset(seed);
  const think = agent.enable_think && !args.switches.has("no-think");
  const parsed = parseResponse(text, { think, actionSep, maxActionsPerTurn });
  const mapped = mapActions(parsed.parsed, env.actionNames);
  const out = new LineWriter(args.switches.has("pretty"));
  await out.line({
    parsed: parsed.parsed,
    actions: mapped.names,
    llm_response: parsed.llmResponse,
    format_penalty: mapped.formatPenalty,
  });
  await out.flush();
}
