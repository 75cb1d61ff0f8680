// Generated bad command lines, in process: every one exits 2 with exactly one line on stderr
// naming what was wrong, nothing on stdout and no stack trace, before any work starts. The
// properties below run 1,500 cases across the subcommands (the config loader's own generated
// cases are in test/config/bad-config.test.ts).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { describe, it } from "vitest";
import { RAGEN_TAGS } from "../../envs/catalog.ts";
import { FIELD_SPECS } from "../../src/config/schema.ts";
import { expectUsageError } from "../helpers/cli.ts";
import { runInProcess } from "./in-process.ts";

const RUNS = Number(process.env.ROLLGYM_PROPERTY_RUNS ?? 200);
const dir = mkdtempSync(join(tmpdir(), "rollgym-bad-input-"));
const TAGS = new Set(RAGEN_TAGS.map((t) => t.tag));
const SEED_MAX = 2 ** 32 - 1;

/** Valid noise a bad command line may also carry. */
const tagArb = fc.constantFrom(...TAGS);
const word = fc.stringMatching(/^[a-z][a-z0-9-]{0,10}$/);

/** Commands that take a TAG and a --seed/--seeds, with the rest of a valid command line. */
const SEEDED: readonly ((tag: string, seed: string) => string[])[] = [
  (tag, seed) => ["envs", "sample", tag, "--seeds", seed],
  (tag, seed) => ["envs", "play", tag, "--seed", seed, "--actions", "Up"],
  (tag, seed) => ["envs", "prompt", tag, "--seed", seed],
  (tag, seed) => ["parse", tag, "--seed", seed],
];

const badSeed = fc.oneof(
  fc.bigInt({ min: BigInt(SEED_MAX) + 1n, max: 10n ** 30n }).map(String),
  fc.integer({ max: -1 }).map(String),
  fc.double({ noInteger: true, noDefaultInfinity: true, noNaN: true }).map(String),
  fc.stringMatching(/^[a-z_ .,:;!?]{1,8}$/),
  fc.tuple(fc.nat(1000), fc.nat(999)).map(([a, b]) => `${a + b + 1}..${a}`), // ends before it starts
);

async function expectRefused(argv: string[], mentions: readonly string[], stdin = ""): Promise<void> {
  expectUsageError(await runInProcess(argv, stdin), mentions);
}

const FLAGS_OF: Record<string, string[]> = {
  "envs list": [],
  "envs sample": ["seeds", "solve"],
  "envs play": ["seed", "actions"],
  "envs prompt": ["seed", "no-think", "ragen-vocabulary"],
  "envs check": [],
  parse: ["seed", "no-think", "max-actions-per-turn", "action-sep"],
  filter: ["strategy", "value", "type", "metric", "buckets"],
  rollout: ["mode", "tag", "groups", "seed", "out", "json", "llm", "model"],
  serve: ["port", "token", "llm", "model"],
  show: ["group", "episode", "outcome"],
  demo: ["tag", "seed", "prompt"],
};
const KNOWN_FLAGS = new Set([
  ...Object.values(FLAGS_OF).flat(),
  "config",
  "plugin",
  "pretty",
  "help",
  "raw",
  "tag",
  "timings",
]);

describe("generated bad input: exit 2, one line, empty stdout, no trace", () => {
  it("an unknown --option on any command names it and the allowed ones", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...Object.keys(FLAGS_OF)),
        word.filter((w) => !KNOWN_FLAGS.has(w) && !w.startsWith("no-") && w.length > 1),
        async (command, flag) => {
          await expectRefused([...command.split(" "), `--${flag}`], [`--${flag}`, "allowed"]);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("a seed outside [0, 2^32) or a malformed range is refused by every seeded command", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...SEEDED), tagArb, badSeed, async (build, tag, seed) => {
        const argv = build(tag, seed);
        await expectRefused(argv, [argv.includes("--seeds") ? "--seeds" : "--seed"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("an unknown tag is refused with the known ones, wherever a tag is named", async () => {
    const unknown = fc.stringMatching(/^[A-Za-z][A-Za-z0-9_]{0,14}$/).filter((t) => !TAGS.has(t));
    const builds: ((tag: string) => string[])[] = [
      (tag) => ["envs", "sample", tag, "--seeds", "1"],
      (tag) => ["envs", "play", tag, "--seed", "1", "--actions", "Up"],
      (tag) => ["envs", "prompt", tag, "--seed", "1"],
      (tag) => ["envs", "check", "SimpleSokoban", tag],
      (tag) => ["parse", tag],
      (tag) => ["demo", "--tag", tag],
      (tag) => ["rollout", "--tag", tag, "--groups", "1"],
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...builds), unknown, async (build, tag) => {
        await expectRefused(build(tag), [tag, "CoordSokoban"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("an unknown config key in an override is named in full, on every command that reads the config", async () => {
    const groups = ["agent_proxy", "es_manager.train", "rollgym.llm", "actor_rollout_ref.rollout", "seed"];
    const key = fc
      .tuple(fc.constantFrom(...groups), word)
      .map(([group, leaf]) => `${group}.zz_${leaf.replace(/-/g, "_")}`);
    const builds: ((override: string) => string[])[] = [
      (o) => ["rollout", o],
      (o) => ["serve", "--port", "0", o],
      (o) => ["envs", "list", o],
      (o) => ["envs", "sample", "Bandit", "--seeds", "1", o],
      (o) => ["envs", "check", "Bandit", o],
      (o) => ["parse", "Bandit", o],
    ];
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...builds), key, fc.jsonValue(), async (build, k, v) => {
        await expectRefused(build(`${k}=${JSON.stringify(v)}`), [k, "unknown config key", "override"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("a bad value for a known config key names the key, the value's source and what is allowed", async () => {
    const intKeys = Object.entries(FIELD_SPECS)
      .filter(([, spec]) => (spec as { type?: string }).type === "integer")
      .map(([k]) => k);
    const bad = fc.oneof(
      fc.integer({ min: -1_000_000, max: -2 }).map(String),
      fc
        .stringMatching(/^[a-z]{2,8}$/)
        .filter((s) => !["true", "false", "null", "auto", "yes", "no", "on", "off"].includes(s)),
      fc.double({ noInteger: true, noDefaultInfinity: true, noNaN: true, min: -1e6, max: 1e6 }).map(String),
      fc.constant("[1, 2]"),
      fc.constant("{a: 1}"),
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...intKeys), bad, async (k, v) => {
        await expectRefused(["rollout", `${k}=${v}`], [k, "allowed", "override"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("a batch whose seeds would pass 2^32 − 1 is refused, never wrapped", async () => {
    const seedFlag = fc
      .integer({ min: 2, max: 64 })
      .chain((groups) =>
        fc
          .integer({ min: SEED_MAX - groups + 2, max: SEED_MAX })
          .map((seed) => ["rollout", "--tag", "Bandit", "--groups", String(groups), "--seed", String(seed)]),
      );
    // seed.train 10000 + step × 8 groups: the first step past the range and far beyond.
    const stepFlag = fc
      .integer({
        min: Math.ceil((SEED_MAX - 10_000 - 7) / 8) + 1,
        max: Math.floor(Number.MAX_SAFE_INTEGER / 16),
      })
      .map((step) => ["rollout", "--step", String(step)]);
    await fc.assert(
      fc.asyncProperty(fc.oneof(seedFlag, stepFlag), async (argv) => {
        await expectRefused(argv, [argv.includes("--seed") ? "--seed" : "--step", String(SEED_MAX)]);
      }),
      { numRuns: RUNS },
    );
  });

  it("a batch over the configured limits is refused before anything is allocated", async () => {
    const tooManyGroups = fc
      .bigInt({ min: 4097n, max: 10n ** 15n })
      .map((g) => ["rollout", "--tag", "Bandit", "--groups", String(g)]);
    const tooManyEpisodes = fc
      .integer({ min: 1, max: 4096 })
      .chain((g) =>
        fc
          .integer({ min: Math.floor(65_536 / g) + 1, max: 10_000_000 })
          .map((size) => ["rollout", "--tag", "Bandit", "--groups", String(g), "--group-size", String(size)]),
      );
    const lowered = fc
      .integer({ min: 2, max: 100 })
      .map((limit) => [
        "rollout",
        "--tag",
        "Bandit",
        "--groups",
        String(limit + 1),
        `rollgym.limits.max_groups_per_rollout=${limit}`,
      ]);
    await fc.assert(
      fc.asyncProperty(fc.oneof(tooManyGroups, tooManyEpisodes, lowered), async (argv) => {
        await expectRefused(argv, ["--groups", "max_"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("an --out that cannot be written is refused before the rollout starts", async () => {
    const path = fc.oneof(
      word.map((w) => join(dir, `no-such-${w}`, "x.jsonl")),
      fc.constant(dir),
      fc.constant(tmpdir()),
      word.map((w) => `/nonexistent-${w}/run.jsonl`),
    );
    await fc.assert(
      fc.asyncProperty(path, fc.constantFrom("train", "val"), async (out, mode) => {
        await expectRefused(["rollout", "--mode", mode, "--out", out], ["--out", "cannot write"]);
      }),
      { numRuns: RUNS },
    );
  });

  it("filter refuses stdin that is not a JSON array of equal, non-empty groups of numbers", async () => {
    const isGroups = (text: string): boolean => {
      try {
        const data = JSON.parse(text);
        return (
          Array.isArray(data) &&
          data.length > 0 &&
          data.every(
            (g) =>
              Array.isArray(g) &&
              g.length === data[0].length &&
              g.length > 0 &&
              g.every((x: unknown) => typeof x === "number"),
          )
        );
      } catch {
        return false;
      }
    };
    const stdin = fc
      .oneof(
        fc.string(),
        fc.jsonValue().map((v) => JSON.stringify(v)),
      )
      .filter((t) => !isGroups(t));
    await fc.assert(
      fc.asyncProperty(stdin, async (text) => {
        await expectRefused(["filter"], ["stdin"], text);
      }),
      { numRuns: RUNS },
    );
  });

  it("filter and parse refuse bad flag values", async () => {
    const cases = fc.oneof(
      fc
        .stringMatching(/^[a-z_]{1,10}$/)
        .filter((s) => !["top_p", "top_k", "top_k_abs", "min_p"].includes(s))
        .map((s) => ["filter", "--strategy", s]),
      fc
        .double({ max: -1e-9, noDefaultInfinity: true, noNaN: true })
        .map((v) => ["filter", "--value", String(v)]),
      fc
        .integer({ min: 1001, max: 1e9 })
        .map((n) => ["parse", "Bandit", "--max-actions-per-turn", String(n)]),
      fc.integer({ max: 0 }).map((n) => ["parse", "Bandit", "--max-actions-per-turn", String(n)]),
      fc.constantFrom(" ", "", "   ").map((s) => ["parse", "Bandit", "--action-sep", s]),
    );
    await fc.assert(
      fc.asyncProperty(cases, async (argv) => {
        await expectRefused(argv, [argv[argv.length - 2]]);
      }),
      { numRuns: RUNS },
    );
  });

  it("show refuses files that are not episode files", async () => {
    const { writeFileSync } = await import("node:fs");
    let n = 0;
    const content = fc.oneof(
      fc.string({ minLength: 1 }),
      fc.jsonValue().map((v) => JSON.stringify(v)),
      fc.constant('{"type":"header","format":"rollgym.episodes","version":99}'),
    );
    await fc.assert(
      fc.asyncProperty(content, async (text) => {
        const path = join(dir, `bad-${n++}.jsonl`);
        writeFileSync(path, text);
        await expectRefused(["show", path], [path]);
      }),
      { numRuns: RUNS },
    );
  });

  it("positionals that are neither tags nor overrides are refused", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(["rollout"], ["serve", "--port", "0"], ["envs", "list"], ["filter"], ["demo"]),
        word,
        async (command, extra) => {
          await expectRefused([...command, extra], ["unexpected argument", extra]);
        },
      ),
      { numRuns: RUNS },
    );
  });
});
