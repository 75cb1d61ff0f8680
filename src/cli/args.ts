// A small, strict argument parser: every command declares its flags, and anything else is a
// UsageError that names the flag and what is allowed. main.ts prints it as one line, exit 2.
import { closestName } from "../../envs/registry.ts";
import { MAX_SEED as SEED_MAX } from "../../protocol/settings.ts";
import { CONFIG_KEYS } from "../config/keys.ts";
import { RollgymError } from "../errors/catalogue.ts";

/** A mistake in the input: one line on stderr, exit status 2 (errors/catalogue.ts `usage`). */
export class UsageError extends RollgymError<"usage"> {
  constructor(message: string) {
    super("usage", { message });
    this.name = "UsageError";
  }
}

/** The command ran (or could not start) and failed: one line on stderr, exit status 1. */
export class CommandFailure extends RollgymError<"command_failed"> {
  constructor(message: string) {
    super("command_failed", { message });
    this.name = "CommandFailure";
  }
}

export interface FlagSpec {
  /** Takes a value (`--seed 3`) or is a switch (`--solve`). */
  kind: "value" | "switch";
  help: string;
  /** The value's name in the help text (default VALUE). */
  arg?: string;
  /** May be given more than once; every value is kept, in order. */
  repeat?: boolean;
}

/** A flag that sets configuration keys (which may depend on the mode played). */
export type KeyFlagSpec = FlagSpec & { keys: (mode: string) => string[] };

/**
 * A value flag that sets config keys, its help made from the key's schema: the key's
 * description, the key itself (and its val-mode key when that differs), and for a choice the
 * allowed values as the argument's name.
 */
export function keyFlag(keys: (mode: string) => string[], options: { arg?: string } = {}): KeyFlagSpec {
  const [key] = keys("train");
  const [valKey] = keys("val");
  const schema = (CONFIG_KEYS as Record<string, { description: string; enum?: unknown }>)[key];
  if (!schema) throw new RangeError(`keyFlag: no config key ${key}`);
  const choices = Array.isArray(schema.enum) ? { arg: schema.enum.join("|") } : {};
  const where = valKey === key ? key : `${key}; val mode: ${valKey}`;
  return { kind: "value", ...choices, ...options, help: `${schema.description} (${where})`, keys };
}

export interface ParsedArgs {
  positionals: string[];
  /** The value of each value flag (the last one for a repeatable flag). */
  values: Map<string, string>;
  /** Every value of each repeatable flag, in order. */
  lists: Map<string, string[]>;
  switches: Set<string>;
}

/** `--help` or `-h` before a `--`: the command prints its help instead of running. */
export function wantsHelp(argv: readonly string[]): boolean {
  const end = argv.indexOf("--");
  return (end < 0 ? argv : argv.slice(0, end)).some((a) => a === "--help" || a === "-h");
}

/** A command's help, made from its flag specs. */
export function formatHelp(synopsis: string, summary: string, flags: Record<string, FlagSpec>): string {
  const rows = Object.entries(flags).map(([name, spec]) => [
    `--${name}${spec.kind === "value" ? ` ${spec.arg ?? "VALUE"}` : ""}`,
    `${spec.help}${spec.repeat ? " (repeatable)" : ""}`,
  ]);
  rows.push(["-h, --help", "print this help"]);
  const width = Math.max(...rows.map(([left]) => left.length));
  return [
    `usage: rollgym ${synopsis}`,
    "",
    summary,
    "",
    "options:",
    ...rows.map(([left, right]) => `  ${left.padEnd(width)}  ${right}`),
  ].join("\n");
}

export function parseArgs(
  command: string,
  argv: readonly string[],
  flags: Record<string, FlagSpec>,
): ParsedArgs {
  const parsed: ParsedArgs = { positionals: [], values: new Map(), lists: new Map(), switches: new Set() };
  const allowed = (): string => {
    const names = Object.keys(flags).map((f) => `--${f}`);
    return names.length ? names.join(", ") : "none";
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      parsed.positionals.push(...argv.slice(i + 1));
      break;
    }
    // Short options are not a thing here (only -h), so "-x" is a typo, not a tag named "-x".
    if (/^-[^-\d.]/.test(arg)) {
      throw new UsageError(`${command}: unknown option ${arg}; allowed: ${allowed()}, -h, --help`);
    }
    if (!arg.startsWith("--")) {
      parsed.positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const spec = flags[name];
    if (!spec) {
      const guess = closestName(name, Object.keys(flags));
      throw new UsageError(
        `${command}: unknown option --${name}${guess ? ` (did you mean --${guess}?)` : ""}; allowed: ${allowed()}`,
      );
    }
    if (spec.kind === "switch") {
      if (eq >= 0) throw new UsageError(`${command}: --${name} takes no value`);
      parsed.switches.add(name);
      continue;
    }
    const value: string | undefined = eq >= 0 ? arg.slice(eq + 1) : argv[i + 1];
    if (eq < 0) {
      if (value === undefined || value.startsWith("--"))
        throw new UsageError(`${command}: --${name} needs a value: ${spec.help}`);
      i++;
    }
    if (spec.repeat) parsed.lists.set(name, [...(parsed.lists.get(name) ?? []), value]);
    else if (parsed.values.has(name)) throw new UsageError(`${command}: --${name} is given twice`);
    parsed.values.set(name, value);
  }
  return parsed;
}

/** A seed: a decimal integer in [0, 2^32). */
export function parseSeed(flag: string, text: string): number {
  if (!/^\d+$/.test(text) || Number(text) > SEED_MAX) {
    throw new UsageError(`${flag}: ${JSON.stringify(text)} is not a seed (an integer from 0 to ${SEED_MAX})`);
  }
  return Number(text);
}

/** `A..B` (inclusive) or a single seed `N`. */
export function parseSeedRange(flag: string, text: string): [number, number] {
  const parts = text.split("..");
  if (parts.length > 2) {
    throw new UsageError(`${flag}: ${JSON.stringify(text)} is not a seed N or a range A..B`);
  }
  const first = parseSeed(flag, parts[0]);
  const last = parts.length === 2 ? parseSeed(flag, parts[1]) : first;
  if (last < first) throw new UsageError(`${flag}: range ${text} ends before it starts (B < A)`);
  return [first, last];
}

export function parseInteger(flag: string, text: string, min: number, max: number): number {
  if (!/^-?\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new UsageError(`${flag}: ${JSON.stringify(text)} is not an integer from ${min} to ${max}`);
  }
  return Number(text);
}

export function parseNumber(flag: string, text: string): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value)) {
    throw new UsageError(`${flag}: ${JSON.stringify(text)} is not a finite number`);
  }
  return value;
}

export function parseChoice<T extends string>(flag: string, text: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(text)) {
    const guess = closestName(text, allowed);
    throw new UsageError(
      `${flag}: ${JSON.stringify(text)} is not one of ${allowed.join(", ")}${guess ? ` (did you mean ${JSON.stringify(guess)}?)` : ""}`,
    );
  }
  return text as T;
}

export function parseBoolean(flag: string, text: string): boolean {
  return parseChoice(flag, text, ["true", "false"]) === "true";
}

/** Exactly `count` positionals, named in the error when missing or extra. */
export function expectPositionals(command: string, args: ParsedArgs, names: readonly string[]): string[] {
  if (args.positionals.length < names.length) {
    throw new UsageError(
      `${command}: missing ${names
        .slice(args.positionals.length)
        .map((n) => `<${n}>`)
        .join(" ")}`,
    );
  }
  if (args.positionals.length > names.length) {
    throw new UsageError(`${command}: unexpected argument ${JSON.stringify(args.positionals[names.length])}`);
  }
  return args.positionals;
}
