// A conformance check any env can run (the built-in ones, users' own, and remote ones over the
// wire): reset is a pure function of the seed, episodes replay exactly, a JSON snapshot
// continues the same episode (where the env has snapshots), and stepping after the episode
// ended is refused rather than silently continuing. The env checked is the one the registry
// gives every caller, in its OrderEnforcing. A remote server's own answer to a step after done
// is not judged: OpenEnv's servers pass it to the env, and OpenEnv's own envs step on.
import type { ResolvedTag } from "./registry.ts";
import { MAX_RANDOM_STATE_SEED } from "./rng/numpy-random-state.ts";
import { PythonRandom } from "./rng/python-random.ts";
import { type AsyncEnv, EnvUsageError, type StepResult } from "./types.ts";

export interface ConformanceCheck {
  name: string;
  ok: boolean;
  detail: string;
}

export interface ConformanceOptions {
  seeds?: readonly number[];
  /** Actions to try per episode (fewer when the episode ends first). */
  maxSteps?: number;
}

interface Trace {
  observation: string;
  steps: StepResult[];
}

/** The action a pick (0..63) names: an index into the action list, or the number as text for free-text envs. */
function action(env: AsyncEnv, pick: number): number | string {
  return env.textActions ? String(pick) : (pick % env.actionNames.length) + 1;
}

/** Play `picks` from reset(seed), stopping when the episode ends. */
async function play(env: AsyncEnv, seed: number, picks: readonly number[]): Promise<Trace> {
  const observation = await env.reset(seed);
  const steps: StepResult[] = [];
  for (const pick of picks) {
    if (env.done) break;
    steps.push(await env.step(action(env, pick)));
  }
  return { observation, steps };
}

/** Runs `use` on a fresh env of `tag`, closing it after (a remote env's session). */
async function withEnv<T>(tag: ResolvedTag, use: (env: AsyncEnv) => Promise<T>): Promise<T> {
  const env = tag.open();
  try {
    return await use(env);
  } finally {
    env.close?.();
  }
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export async function checkConformance(
  tag: ResolvedTag,
  options: ConformanceOptions = {},
): Promise<ConformanceCheck[]> {
  const seeds = options.seeds ?? [0, 1, 123, 10000, MAX_RANDOM_STATE_SEED];
  const maxSteps = options.maxSteps ?? 30;
  const checks: ConformanceCheck[] = [];
  // A check is a function returning a failure or null; an env that throws fails that check.
  const run = async (name: string, detail: string, check: () => Promise<string | null>): Promise<void> => {
    let failure: string | null;
    try {
      failure = await check();
    } catch (error) {
      failure = `threw ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`;
    }
    checks.push({ name, ok: failure === null, detail: failure ?? detail });
  };

  const pickers = new PythonRandom(20260401);
  const scripts = seeds.map(() => Array.from({ length: maxSteps }, () => pickers.randbelow(64)));
  let traces: Trace[] = [];

  // Same seed ⇒ same episode, also across env instances and after other episodes ran.
  await run("same seed, same episode", `${seeds.length} seeds replayed on fresh instances`, async () => {
    traces = await withEnv(tag, async (shared) => {
      const played: Trace[] = [];
      for (const [i, seed] of seeds.entries()) played.push(await play(shared, seed, scripts[i]));
      return played;
    });
    for (const [i, seed] of seeds.entries()) {
      const again = await withEnv(tag, (env) => play(env, seed, scripts[i]));
      if (!same(again, traces[i])) return `seed ${seed} played twice gave different episodes`;
    }
    return null;
  });

  // An env may hide its puzzle at reset (a number to guess), so the seeds play the same actions
  // and their episodes, steps included, must differ: an env that ignores the seed (OpenEnv drops
  // it without a word for a reset that takes none) plays the same puzzle every time.
  await run("seeds matter", "different seeds give different puzzles for the same actions", async () => {
    const episodes = await withEnv(tag, async (env) => {
      const played: string[] = [];
      for (const seed of seeds) played.push(JSON.stringify(await play(env, seed, scripts[0])));
      return played;
    });
    return new Set(episodes).size > 1
      ? null
      : `seeds ${seeds.join(", ")} gave the same episode for the same ${scripts[0].length} actions: the env ignores the seed`;
  });

  await run("well-formed steps", "observations are text, rewards finite, info complete", async () => {
    let failure: string | null = traces.length ? null : "no episode could be played";
    for (const trace of traces) {
      if (typeof trace.observation !== "string" || trace.observation === "")
        failure = "reset returned no observation text";
      for (const s of trace.steps) {
        if (typeof s.observation !== "string") failure = "a step returned no observation text";
        if (!Number.isFinite(s.reward)) failure = `a step returned reward ${s.reward}`;
        for (const key of ["success", "action_is_effective", "action_is_valid"] as const) {
          if (typeof s.info[key] !== "boolean") failure = `info.${key} is not a boolean`;
        }
      }
    }
    return failure;
  });

  // A JSON snapshot taken mid-episode continues exactly (when the env declares snapshots).
  const snapshots = await withEnv(
    tag,
    async (env) => typeof env.snapshot === "function" && typeof env.restore === "function",
  );
  const snapshotCheck = "snapshot survives encode/decode";
  if (!snapshots)
    checks.push({ name: snapshotCheck, ok: true, detail: "skipped: the env declares no snapshot/restore" });
  else
    await run(snapshotCheck, "JSON snapshot mid-episode continues identically", async () => {
      for (const [i, seed] of seeds.entries()) {
        const failure = await withEnv(tag, (original) =>
          withEnv(tag, async (copy) => {
            await original.reset(seed);
            const half = Math.floor(traces[i].steps.length / 2);
            for (const pick of scripts[i].slice(0, half)) await original.step(action(original, pick));
            copy.restore!(JSON.parse(JSON.stringify(original.snapshot!())));
            if (copy.render() !== original.render()) return `seed ${seed}: restored render differs`;
            for (const pick of scripts[i].slice(half)) {
              if (original.done) break;
              const next = action(original, pick);
              if (!same(await original.step(next), await copy.step(next)))
                return `seed ${seed}: restored episode diverged`;
            }
            return null;
          }),
        );
        if (failure) return failure;
      }
      return null;
    });

  // Stepping after the end is an error, and leaves the episode as it was. For a remote tag that
  // is rollgym's wrapper refusing: what its server does with such a step (OpenEnv's step on,
  // some reset, some refuse) no rollgym episode ever asks.
  const remote = tag.type.open !== undefined;
  let ended = 0;
  const refusedDetail = remote
    ? "finished episodes refuse another step (rollgym's, before the server; OpenEnv servers may step on)"
    : "finished episodes refuse another step";
  await run("steps after done are refused", refusedDetail, async () => {
    let failure: string | null = null;
    for (const [i, seed] of seeds.entries()) {
      failure =
        (await withEnv(tag, async (env) => {
          const trace = await play(env, seed, [...scripts[i], ...scripts[i], ...scripts[i]]);
          if (!env.done) return null;
          ended++;
          const before = env.render();
          let problem: string | null = null;
          try {
            await env.step(action(env, 0));
            problem = `seed ${seed}: step after done was accepted`;
          } catch (error) {
            if (!(error instanceof EnvUsageError))
              problem = `seed ${seed}: step after done threw ${String(error)}`;
          }
          if (env.render() !== before) problem = `seed ${seed}: step after done changed the state`;
          if (!trace.steps.at(-1)?.terminated && !trace.steps.at(-1)?.truncated)
            problem = `seed ${seed}: done without a final step`;
          return problem;
        })) ?? failure;
    }
    return failure;
  });
  if (ended === 0 && checks.at(-1)?.ok) checks.at(-1)!.detail = "no episode ended within the steps tried";
  return checks;
}
