// A small, strict argument parser: every command declares its flags, and anything else is a
// UsageError that names the flag and what is allowed. main.ts prints it as one line, exit 2.

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** The command ran (or could not start) and failed: one line on stderr, exit status 1. */
export class CommandFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CommandFailure";
  }
}

export interface FlagSpec {
  /** Takes a value (`--seed 3`) or is a switch (`--solve`). */
  kind: "value" | "switch";
  help: string;
}

export interface ParsedArgs {
  positionals: string[];
  values: Map<string, string>;
  switches: Set<string>;
}

export function parseArgs(
  command: string,
  argv: readonly string[],
  flags: Record<string, FlagSpec>,
): ParsedArgs {
  const parsed: ParsedArgs = { positionals: [], values: new Map(), switches: new Set() };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith("--") || arg === "--") {
      parsed.positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const spec = flags[name];
    if (!spec) {
      const allowed = Object.keys(flags).map((f) => `--${f}`);
      throw new UsageError(
        `${command}: unknown option --${name}; allowed: ${allowed.length ? allowed.join(", ") : "none"}`,
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
        throw new UsageError(`${command}: --${name} needs a value`);
      i++;
    }
    if (parsed.values.has(name)) throw new UsageError(`${command}: --${name} is given twice`);
    parsed.values.set(name, value);
  }
  return parsed;
}

export const SEED_MAX = 2 ** 32 - 1;

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
    throw new UsageError(`${flag}: ${JSON.stringify(text)} is not one of ${allowed.join(", ")}`);
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
