// A conformance check any env can run (the built-in ones and users' own): reset is a pure
// function of the seed, episodes replay exactly, a JSON snapshot continues the same episode,
// and stepping after the episode ended is refused rather than silently continuing.
import type { ResolvedTag } from "./registry.ts";
import { PythonRandom } from "./rng/python-random.ts";
import { type Env, EnvUsageError, type StepResult } from "./types.ts";

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

/** Play `actions` (indices into the action list, taken modulo its length) from reset(seed). */
function play(env: Env, seed: number, picks: readonly number[]): Trace {
  const observation = env.reset(seed);
  const steps: StepResult[] = [];
  for (const pick of picks) {
    if (env.done) break;
    steps.push(env.step((pick % env.actionNames.length) + 1));
  }
  return { observation, steps };
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function checkConformance(tag: ResolvedTag, options: ConformanceOptions = {}): ConformanceCheck[] {
  const seeds = options.seeds ?? [0, 1, 123, 10000, 4294967295];
  const maxSteps = options.maxSteps ?? 30;
  const checks: ConformanceCheck[] = [];
  // A check is a function returning a failure or null; an env that throws fails that check.
  const run = (name: string, detail: string, check: () => string | null): void => {
    let failure: string | null;
    try {
      failure = check();
    } catch (error) {
      failure = `threw ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`;
    }
    checks.push({ name, ok: failure === null, detail: failure ?? detail });
  };

  const pickers = new PythonRandom(20260401);
  const scripts = seeds.map(() => Array.from({ length: maxSteps }, () => pickers.randbelow(64)));
  let traces: Trace[] = [];

  // Same seed ⇒ same episode, also across env instances and after other episodes ran.
  run("same seed, same episode", `${seeds.length} seeds replayed on fresh instances`, () => {
    const shared = tag.make();
    traces = seeds.map((seed, i) => play(shared, seed, scripts[i]));
    const differs = seeds.findIndex((seed, i) => !same(play(tag.make(), seed, scripts[i]), traces[i]));
    return differs < 0 ? null : `seed ${seeds[differs]} played twice gave different episodes`;
  });

  run("seeds matter", "different seeds give different puzzles", () =>
    new Set(traces.map((t) => t.observation)).size > 1 ? null : "every seed gave the same first observation",
  );

  run("well-formed steps", "observations are text, rewards finite, info complete", () => {
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

  // A JSON snapshot taken mid-episode continues exactly.
  run("snapshot survives encode/decode", "JSON snapshot mid-episode continues identically", () => {
    let failure: string | null = null;
    seeds.forEach((seed, i) => {
      if (failure) return;
      const original = tag.make();
      original.reset(seed);
      const half = Math.floor(traces[i].steps.length / 2);
      for (const pick of scripts[i].slice(0, half)) original.step((pick % original.actionNames.length) + 1);
      const copy = tag.make();
      copy.restore(JSON.parse(JSON.stringify(original.snapshot())));
      if (copy.render() !== original.render()) failure = `seed ${seed}: restored render differs`;
      for (const pick of scripts[i].slice(half)) {
        if (original.done || failure) break;
        const action = (pick % original.actionNames.length) + 1;
        if (!same(original.step(action), copy.step(action)))
          failure = `seed ${seed}: restored episode diverged`;
      }
    });
    return failure;
  });

  // Stepping after the end is an error, and leaves the episode as it was.
  let ended = 0;
  run("steps after done are refused", "finished episodes refuse another step", () => {
    let failure: string | null = null;
    seeds.forEach((seed, i) => {
      const env = tag.make();
      const trace = play(env, seed, [...scripts[i], ...scripts[i], ...scripts[i]]);
      if (!env.done) return;
      ended++;
      const before = env.render();
      try {
        env.step(1);
        failure = `seed ${seed}: step after done was accepted`;
      } catch (error) {
        if (!(error instanceof EnvUsageError))
          failure = `seed ${seed}: step after done threw ${String(error)}`;
      }
      if (env.render() !== before) failure = `seed ${seed}: step after done changed the state`;
      if (!trace.steps.at(-1)?.terminated && !trace.steps.at(-1)?.truncated)
        failure = `seed ${seed}: done without a final step`;
    });
    return failure;
  });
  if (ended === 0 && checks.at(-1)?.ok) checks.at(-1)!.detail = "no episode ended within the steps tried";
  return checks;
}
