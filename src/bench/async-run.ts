// `rollgym bench async`: wall time per training step of a simulated trainer, synchronous
// against asynchronous, on the same mock engines and the same server (PROTOCOL.md "Weight
// updates", "Endless streams", "Staleness").
//
// Each step the trainer takes B groups, "trains" for the step time (it sleeps: the GPU would be
// busy, not this process) and pushes weights: begin_update → the mock engines load "step-N"
// (POST /mock/load_weights) → end_update.
// - sync: the classic loop: one rollout of B groups, then the step, then the update.
// - S = s: one endless stream (in_flight B, groups_per_step B, max_staleness s) that plays on
//   while the trainer steps and updates; the trainer takes the first B groups to arrive.
//   S = 0 is synchronous through the same endless path: the control.
// Every mode plays the same seeds (group k of a step plays seed + k of the schedule).
import { setTimeout as sleep } from "node:timers/promises";
import type { PauseMode } from "../../protocol/settings.ts";
import { serverRoot } from "../llm/engine.ts";
import {
  describeLatencyModel,
  LATENCY_PRESETS,
  type LatencyModel,
  type LatencyPresetName,
  type LognormalLengths,
} from "../mock-engine/latency.ts";
import { type Child, startMockEngines, startServe, stopAll } from "./children.ts";
import type { Progress } from "./progress.ts";
import { scrapeEngines } from "./prometheus.ts";
import { MOCK_MODEL } from "./run.ts";
import { mean, median, round } from "./stats.ts";
import { type ArrivedGroup, type RolloutResult, TrainerClient, type UpdateTiming } from "./trainer.ts";

export interface AsyncBenchSettings {
  tag: string;
  groupSize: number;
  /** B: groups the trainer consumes per step (and the groups running at once in every mode). */
  groupsPerStep: number;
  /** Training steps per mode. */
  steps: number;
  maxTurn: number;
  maxTokens: number;
  seed: number;
  /** The max_staleness of each asynchronous mode, in order. */
  staleness: number[];
  /** Also run each mode with S > 0 under strict_staleness ("S=s strict"). */
  strict?: boolean;
  /** The trainer's step time; null: the measured synchronous rollout time per step. */
  stepTimeS: number | null;
  replicas: number;
  latencyModel: LatencyPresetName;
  /** The engines' response lengths instead of the latency model's (null: the policy's own); undefined: the model's. */
  responseTokens?: LognormalLengths | null;
  pauseMode: PauseMode;
}

export interface AsyncModeResult {
  /** "sync", or "S=s" for an endless stream with max_staleness s. */
  mode: string;
  max_staleness: number | null;
  steps: number;
  groups_trained: number;
  wall_s: number;
  /** wall_s ÷ steps, the pipeline's fill included. */
  s_per_step: number;
  s_per_step_p50: number;
  /** Time the trainer waited for its B groups, per step (sync: the rollout time). */
  wait_s_per_step: number;
  /** Each step's wall time and wait, in order (an async mode's first step fills the pipeline). */
  step_s: number[];
  wait_s: number[];
  groups_per_s: number;
  /** Tokens the engines generated over the mode's wall time, ÷ that time (unused groups included). */
  engine_tokens_per_s: number;
  /** The sync mode's s_per_step ÷ this one's. */
  speedup_vs_sync: number | null;
  /** Trained groups by age (the ordinal in force when the trainer took it − its min_version). */
  ages: Record<string, number>;
  /** Trained groups older than the capacity rule allows (S, plus one per step it was overtaken: see agesOf). */
  age_rule_violations: number;
  /** Group frames whose `admitted` counts break accepted + running ≤ (S + v + 1) × B. */
  capacity_violations: number;
  /** Groups the server says it sent that never arrived, and groups that arrived twice. */
  groups_lost: number;
  groups_duplicated: number;
  /** Groups that arrived after the last step (a stream is cancelled then; sync: none). */
  groups_unused: number;
  /** Failed episodes in trained groups. */
  episodes_failed: number;
  /** Sync only: median time from a rollout's start to a group's arrival (the rollout waits for its slowest). */
  group_finish_s_p50: number | null;
  update: {
    /** begin_update → update_begun: every replica paused. */
    pausing_ms_p50: number;
    /** begin_update → update_ended: the time admission was closed and engines paused. */
    paused_ms_p50: number;
    paused_ms_max: number;
    /** Engine requests in flight when admission closed, mean over updates. */
    in_flight_mean: number;
  };
}

export interface AsyncBenchResult {
  workload: {
    tag: string;
    group_size: number;
    groups_per_step: number;
    max_turn: number;
    max_tokens: number;
    replicas: number;
    latency_model: LatencyPresetName;
    latency_model_description: string;
    pause_mode: PauseMode;
    seed: number;
  };
  step_time_s: number;
  step_time_source: "flag" | "measured";
  /** One rollout of B groups per step, timed for the default step time (after a warm-up rollout); empty with --step-time. */
  calibration_rollout_s: number[];
  modes: AsyncModeResult[];
  wall_s: number;
}

export async function runAsyncBench(
  settings: AsyncBenchSettings,
  progress: Progress,
): Promise<AsyncBenchResult> {
  const started = performance.now();
  const B = settings.groupsPerStep;
  const children: Child[] = [];
  let trainer: TrainerClient | null = null;
  try {
    const engines = await startMockEngines(settings.replicas, MOCK_MODEL, [
      "--latency-model",
      settings.latencyModel,
      ...(settings.responseTokens === undefined
        ? []
        : ["--response-tokens", responseTokensFlag(settings.responseTokens)]),
    ]);
    children.push(...engines);
    const urls = engines.map((e) => e.url);
    const server = await startServe(urls, MOCK_MODEL, B, [
      // Groups are acknowledged as they arrive: the buffer bound must never be what paces a stream.
      "--max-buffered-groups",
      String(Math.max(64, 4 * B)),
      `rollgym.llm.concurrency=${2 * B * settings.groupSize}`,
    ]);
    children.push(server);
    trainer = await TrainerClient.connect(server.url, { credit: 4 * B, trainer: true });
    const bench = new Trainer(trainer, settings, urls, progress);

    // One update first, so that every group frame carries versions (PROTOCOL.md "Versions").
    await bench.update();
    await bench.rollout("warm-up", settings.seed);
    // The step time defaults to the sync rollout time of the very steps to come: each step's
    // seeds once (how long a rollout takes depends on its puzzles, as its episodes' lengths do).
    const calibration: number[] = [];
    if (settings.stepTimeS === null) {
      for (let k = 0; k < settings.steps; k++) {
        progress.update("calibrating the step time: rollout", k, settings.steps);
        const t = performance.now();
        await bench.rollout(`calibrate-${k}`, settings.seed + k * B);
        calibration.push((performance.now() - t) / 1000);
      }
    }
    const stepTime = settings.stepTimeS ?? mean(calibration);
    progress.note(
      `step time ${round(stepTime, 3)} s (${settings.stepTimeS === null ? "the measured sync rollout time per step" : "--step-time"})`,
    );

    const modes: AsyncModeResult[] = [];
    const report = (m: AsyncModeResult) => {
      modes.push(m);
      progress.note(
        `${m.mode}: ${m.s_per_step} s/step, ${m.groups_per_s} groups/s, waited ${m.wait_s_per_step} s/step, ` +
          `ages ${JSON.stringify(m.ages)}, paused ${m.update.paused_ms_p50} ms/update, ${m.groups_lost} lost`,
      );
    };
    report(await bench.syncMode(stepTime));
    for (const s of settings.staleness) {
      report(await bench.streamMode(s, stepTime, false));
      if (settings.strict && s > 0) report(await bench.streamMode(s, stepTime, true));
    }
    const sync = modes[0].s_per_step;
    for (const m of modes) m.speedup_vs_sync = m.s_per_step > 0 ? round(sync / m.s_per_step, 3) : null;

    return {
      workload: {
        tag: settings.tag,
        group_size: settings.groupSize,
        groups_per_step: B,
        max_turn: settings.maxTurn,
        max_tokens: settings.maxTokens,
        replicas: settings.replicas,
        latency_model: settings.latencyModel,
        latency_model_description: describeLatencyModel(latencyModelOf(settings)),
        pause_mode: settings.pauseMode,
        seed: settings.seed,
      },
      step_time_s: round(stepTime, 3),
      step_time_source: settings.stepTimeS === null ? "measured" : "flag",
      calibration_rollout_s: calibration.map((s) => round(s, 3)),
      modes,
      wall_s: round((performance.now() - started) / 1000, 1),
    };
  } finally {
    trainer?.close();
    await stopAll(children);
  }
}

/** The latency model the engines run: the preset, its response lengths replaced by --response-tokens. */
function latencyModelOf(settings: AsyncBenchSettings): LatencyModel {
  const preset = LATENCY_PRESETS[settings.latencyModel];
  return settings.responseTokens === undefined
    ? preset
    : { ...preset, responseTokens: settings.responseTokens };
}

/** The mock engine's --response-tokens text for `lengths` (parseResponseTokens reads it back). */
function responseTokensFlag(lengths: LognormalLengths | null): string {
  return lengths === null ? "natural" : `lognormal:${lengths.median}:${lengths.p99}`;
}

/** What each mode measures its own way, beside what every mode's meter measures. */
type ModeOwnField =
  | "groups_lost"
  | "groups_duplicated"
  | "groups_unused"
  | "capacity_violations"
  | "group_finish_s_p50";

/** A group the trainer took into a step (1, 2, … in its mode), and the ordinal in force then. */
interface Trained {
  group: ArrivedGroup;
  step: number;
  ordinal: number;
}

/** The simulated trainer's loops over one connection, and what each mode measured. */
class Trainer {
  private readonly client: TrainerClient;
  private readonly settings: AsyncBenchSettings;
  private readonly urls: readonly string[];
  private readonly progress: Progress;
  private ordinal = 0;

  constructor(
    client: TrainerClient,
    settings: AsyncBenchSettings,
    urls: readonly string[],
    progress: Progress,
  ) {
    this.client = client;
    this.settings = settings;
    this.urls = urls;
    this.progress = progress;
  }

  /** One weight update: the engines load "step-N" while the server holds them paused. */
  update(): Promise<UpdateTiming> {
    const ordinal = ++this.ordinal;
    const label = `step-${ordinal}`;
    return this.client.update(`u${ordinal}`, { label, ordinal }, this.settings.pauseMode, () =>
      loadWeights(this.urls, label),
    );
  }

  /** A finite stream rollout of B groups; resolves with the groups once its batch frame came. */
  async rollout(id: string, seed: number): Promise<{ arrived: ArrivedGroup[]; result: RolloutResult }> {
    const arrived: ArrivedGroup[] = [];
    this.client.onGroup = (g) => {
      if (g.rollout === id) arrived.push(g);
    };
    const result = await this.client.rollout({ ...this.spec(id), seed });
    return { arrived, result };
  }

  /** The classic loop: rollout, step, update. */
  async syncMode(stepTime: number): Promise<AsyncModeResult> {
    const { steps, groupsPerStep: B } = this.settings;
    const meter = await this.meter();
    const trained: Trained[] = [];
    const waits: number[] = [];
    const updates: UpdateTiming[] = [];
    const finishes: number[] = [];
    let lost = 0;
    let duplicated = 0;
    for (let k = 0; k < steps; k++) {
      this.progress.update("sync: step", k, steps);
      const start = performance.now();
      const { arrived, result } = await this.rollout(`sync-${k}`, this.settings.seed + k * B);
      waits.push(performance.now() - start);
      for (const g of arrived) finishes.push(g.at - start);
      ({ lost, duplicated } = tally(result.sent, arrived, { lost, duplicated }));
      trained.push(...arrived.map((group) => ({ group, step: k + 1, ordinal: this.ordinal })));
      await sleep(stepTime * 1000);
      updates.push(await this.update());
      meter.step();
    }
    return {
      ...(await meter.result("sync", null, { trained, waits, updates })),
      groups_lost: lost,
      groups_duplicated: duplicated,
      groups_unused: 0,
      capacity_violations: 0,
      group_finish_s_p50: finishes.length ? round(median(finishes) / 1000, 3) : null,
    };
  }

  /** An endless stream under max_staleness S (strict: strict_staleness), consumed B groups per step. */
  async streamMode(S: number, stepTime: number, strict: boolean): Promise<AsyncModeResult> {
    const { steps, groupsPerStep: B } = this.settings;
    const id = `stream-s${S}${strict ? "-strict" : ""}`;
    const label = `S=${S}${strict ? " strict" : ""}`;
    const arrived: ArrivedGroup[] = [];
    const queue: ArrivedGroup[] = [];
    let wake: (() => void) | null = null;
    this.client.onGroup = (g) => {
      if (g.rollout !== id) return;
      arrived.push(g);
      queue.push(g);
      wake?.();
    };
    const meter = await this.meter();
    const done = this.client.rollout({
      ...this.spec(id),
      seed: this.settings.seed,
      endless: { in_flight: B, max_staleness: S, groups_per_step: B, strict_staleness: strict },
    });
    // A stream that fails (an error frame, a closed socket) ends the wait for its groups.
    const failed = done.then(() => new Promise<never>(() => {}));
    failed.catch(() => {});
    const trained: Trained[] = [];
    const waits: number[] = [];
    const updates: UpdateTiming[] = [];
    for (let k = 0; k < steps; k++) {
      this.progress.update(`${label}: step`, k, steps);
      const start = performance.now();
      while (queue.length < B) {
        await Promise.race([new Promise<void>((resolve) => (wake = resolve)), failed]);
      }
      waits.push(performance.now() - start);
      trained.push(...queue.splice(0, B).map((group) => ({ group, step: k + 1, ordinal: this.ordinal })));
      await sleep(stepTime * 1000);
      updates.push(await this.update());
      meter.step();
    }
    const measured = await meter.result(label, S, { trained, waits, updates }, strict);
    // The stream ends: groups in flight come cut short, then the window and batch frames.
    this.client.cancel(id);
    const { sent } = await done;
    const { lost, duplicated } = tally(sent, arrived, { lost: 0, duplicated: 0 });
    return {
      ...measured,
      groups_lost: lost,
      groups_duplicated: duplicated,
      groups_unused: arrived.length - trained.length,
      capacity_violations: arrived.filter((g) => g.admitted === null || !withinCapacity(g.admitted, S, B))
        .length,
      group_finish_s_p50: null,
    };
  }

  private spec(id: string) {
    const { tag, groupSize, groupsPerStep, maxTurn, maxTokens } = this.settings;
    return { id, tag, groups: groupsPerStep, groupSize, maxTurn, maxTokens };
  }

  /** Times a mode's steps and the engines' tokens over them. */
  private async meter() {
    const start = performance.now();
    const tokens = (await scrapeEngines(this.urls)).generatedTokens;
    const ends: number[] = [];
    const { steps, groupsPerStep: B } = this.settings;
    return {
      step: () => ends.push(performance.now()),
      result: async (
        mode: string,
        S: number | null,
        seen: { trained: Trained[]; waits: number[]; updates: UpdateTiming[] },
        strict = false,
      ): Promise<Omit<AsyncModeResult, ModeOwnField>> => {
        const end = ends.at(-1) ?? performance.now();
        const wall = (end - start) / 1000;
        const generated = (await scrapeEngines(this.urls)).generatedTokens - tokens;
        const stepTimes = ends.map((t, i) => (t - (i === 0 ? start : ends[i - 1])) / 1000);
        const { ages, violations } = agesOf(seen.trained, S ?? 0, B, strict);
        return {
          mode,
          max_staleness: S,
          steps,
          groups_trained: seen.trained.length,
          wall_s: round(wall, 2),
          s_per_step: round(wall / steps, 3),
          s_per_step_p50: round(median(stepTimes), 3),
          wait_s_per_step: round(mean(seen.waits) / 1000, 3),
          step_s: stepTimes.map((t) => round(t, 3)),
          wait_s: seen.waits.map((w) => round(w / 1000, 3)),
          groups_per_s: round(seen.trained.length / wall, 2),
          engine_tokens_per_s: round(generated / wall, 1),
          speedup_vs_sync: null,
          ages,
          age_rule_violations: violations,
          episodes_failed: seen.trained.reduce((n, t) => n + t.group.failed, 0),
          update: {
            pausing_ms_p50: round(median(seen.updates.map((u) => u.pausingMs)), 1),
            paused_ms_p50: round(median(seen.updates.map((u) => u.pausedMs)), 1),
            paused_ms_max: round(Math.max(...seen.updates.map((u) => u.pausedMs)), 1),
            in_flight_mean: round(mean(seen.updates.map((u) => u.inFlight)), 1),
          },
        };
      },
    };
  }
}

/**
 * Ages of the trained groups, and how many are older than the capacity rule allows. A stream's
 * group admitted as the a-th (a = accepted + running in its `admitted`: nothing is dropped here)
 * under version v had a ≤ (S + v + 1) × B, so v ≥ ⌈a ÷ B⌉ − S − 1, and its turns were
 * dispatched at v or later. The trainer updates once per B groups it takes, so a group taken at
 * step k is at most S + k − ⌈a ÷ B⌉ versions old: S when it arrives in its turn, one more per step
 * that later groups overtook it (a long episode). The classic loop's groups: 0. Under
 * strict_staleness no group may be older than S.
 */
export function agesOf(
  trained: readonly Trained[],
  S: number,
  B: number,
  strict = false,
): { ages: Record<string, number>; violations: number } {
  const ages: Record<string, number> = {};
  let violations = 0;
  for (const { group, step, ordinal } of trained) {
    const age = ordinal - (group.minVersion ?? 0);
    ages[age] = (ages[age] ?? 0) + 1;
    const a = group.admitted;
    const bound = a === null ? 0 : strict ? S : S + step - Math.ceil((a.accepted + a.running) / B);
    if (age < 0 || age > bound) violations++;
  }
  return { ages, violations };
}

export function withinCapacity(a: NonNullable<ArrivedGroup["admitted"]>, S: number, B: number): boolean {
  return a.capacity === (S + a.version + 1) * B && a.accepted + a.running <= a.capacity;
}

/** Adds the groups of `sent` that never arrived, and the arrivals of a group seen before. */
function tally(
  sent: readonly number[],
  arrived: readonly ArrivedGroup[],
  so: { lost: number; duplicated: number },
): { lost: number; duplicated: number } {
  const seen = new Set<number>();
  let duplicated = 0;
  for (const g of arrived) {
    if (seen.has(g.group)) duplicated++;
    seen.add(g.group);
  }
  return { lost: so.lost + sent.filter((g) => !seen.has(g)).length, duplicated: so.duplicated + duplicated };
}

/** The trainer "moves its weights by its own means": each mock engine loads `label`. */
async function loadWeights(urls: readonly string[], label: string): Promise<void> {
  await Promise.all(
    urls.map(async (url) => {
      const target = `${serverRoot(url)}/mock/load_weights`;
      const response = await fetch(target, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ version: label }),
      });
      if (!response.ok) throw new Error(`POST ${target}: HTTP ${response.status} ${await response.text()}`);
    }),
  );
}
