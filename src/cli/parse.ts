// `rollgym parse <TAG>`: how RAGEN reads one model turn — parsed actions, canonical names,
// the rebuilt response and the format-penalty decision.
import {
  DEFAULT_ACTION_SEP,
  DEFAULT_MAX_ACTIONS_PER_TURN,
  mapActions,
  parseResponse,
} from "../rollout/parse.ts";
import { expectPositionals, parseArgs, parseInteger, parseSeed } from "./args.ts";
import { lookupTag } from "./envs.ts";
import { LineWriter, readStdin } from "./output.ts";

export async function parseCommand(argv: readonly string[]): Promise<void> {
  const command = "parse";
  const args = parseArgs(command, argv, {
    seed: { kind: "value", help: "seed whose action names apply (Bandit arm names); default 0" },
    "no-think": { kind: "switch", help: "the response opens with <answer> (RAGEN's enable_think=False)" },
    "max-actions-per-turn": { kind: "value", help: "keep at most N actions (default 2)" },
    "action-sep": { kind: "value", help: `action separator (default ${DEFAULT_ACTION_SEP})` },
  });
  const [tagName] = expectPositionals(command, args, ["TAG"]);
  const tag = lookupTag(command, tagName);
  const seedText = args.values.get("seed");
  const seed = seedText === undefined ? 0 : parseSeed("--seed", seedText);
  const maxText = args.values.get("max-actions-per-turn");
  const maxActionsPerTurn =
    maxText === undefined
      ? DEFAULT_MAX_ACTIONS_PER_TURN
      : parseInteger("--max-actions-per-turn", maxText, 1, 1000);
  const actionSep = args.values.get("action-sep") ?? DEFAULT_ACTION_SEP;

  const text = await readStdin();
  const env = tag.make();
  env.reset(seed);
  const parsed = parseResponse(text, { think: !args.switches.has("no-think"), actionSep, maxActionsPerTurn });
  const mapped = mapActions(parsed.parsed, env.actionNames);
  const out = new LineWriter();
  await out.line({
    parsed: parsed.parsed,
    actions: mapped.names,
    llm_response: parsed.llmResponse,
    format_penalty: mapped.formatPenalty,
  });
  await out.flush();
}
