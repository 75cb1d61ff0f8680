// One bench case: engines and a server (started here or attached to), trainers holding a number
// of episodes in flight, a measurement window, the drain, then the plain load generator at the
// same concurrency against the same engines for the saturation ratio, then (chat mode) the floor
// clients (src/bench/floor.ts) with the generator's bodies for the floor multiples.
//
// In flight: the server plays `group_concurrency` groups of a rollout at once, so each of the
// C trainers asks for one stream rollout with many groups and the server runs with
// group_concurrency = episodes ÷ group_size ÷ C. A finished group is replaced by the next queued
// one until the queue runs out, so the window is the stretch where every slot is busy: from the
// end of the first wave (the warm-up rollout before it sized the queue) to the first whole wave
// after --duration, or the last one before a queue runs dry.
import { describeLatencyModel, LATENCY_PRESETS, type LatencyPresetName } from "../mock-engine/latency.ts";
import {
  type Child,
  cpuSeconds,
  memoryOf,
  rollgymEntry,
  startMockEngines,
  startServe,
  stopAll,
} from "./children.ts";
import { FLOOR_CLIENTS, type FloorResult, runFloorChild } from "./floor.ts";
import { chatBodies, chatOnce, generateLoad } from "./load-generator.ts";
import { rssBound } from "./memory-bound.ts";
import type { Progress } from "./progress.ts";
import {
  type EngineCounters,
  engineMetricsUrl,
  engineRequests,
  RunningSampler,
  scrape,
  scrapeConnections,
  scrapeEngines,
} from "./prometheus.ts";
import { median, quantile, round } from "./stats.ts";
import { type ArrivedGroup, type ChatMessages, type RolloutResult, TrainerClient } from "./trainer.ts";

export interface BenchSettings {
  tag: string;
  groupSize: number;
  maxTurn: number;
  maxTokens: number;
  /** Simulated trainers (WebSocket connections), each with its share of the episodes. */
  clients: number;
  /** Length of the measurement window, seconds. */
  durationS: number;
  seed: number;
  /** Real engines instead of mocks (OpenAI base URLs); null = start mock engines. */
  llm: string[] | null;
  model: string;
  /** An already running server to drive instead of starting one. */
  server: string | null;
  /** That server's process id, for its CPU and memory (same machine only). */
  serverPid: number | null;
  token: string | null;
  /** Run the plain load generator after the rollout (the saturation ratio needs it). */
  saturation: boolean;
  /** Run the floor clients after it (chat mode; the floor multiples need them). */
  floor: boolean;
  /** Another checkout whose bin/rollgym.js starts serve (A/B runs); null = this one. */
  serveFrom: string | null;
}

export const BENCH_MODES = ["chat", "tokens"] as const;
/** chat: rollgym's chat mode; tokens: token in, token out (the rollout frame's `tokens: true`). */
export type BenchMode = (typeof BENCH_MODES)[number];

export interface BenchCase {
  episodes: number;
  replicas: number;
  latencyModel: LatencyPresetName | null;
  mode: BenchMode;
}

/** Token mode against chat mode in the same case, from their rows of one run. */
export interface ModeRatios {
  server_cpu_per_turn: number | null;
  engine_requests_per_turn: number | null;
}

export interface CaseResult {
  mode: BenchMode;
  episodes_in_flight: number;
  replicas: number;
  latency_model: string;
  latency_model_description: string;
  clients: number;
  group_size: number;
  group_concurrency: number;
  max_turn: number;
  max_tokens: number;
  window_s: number;
  episodes_per_s: number;
  turns_per_s: number;
  requests_per_s: number;
  tokens_per_s: number;
  /** Mean requests in the engines' batches over the window (sampled each second). */
  engine_running_mean: number | null;
  group_latency_ms: { p50: number; p99: number; max: number; groups: number };
  server_cpu_ms_per_request: number | null;
  /** The serve process's CPU over the window ÷ the turns the server applied in it. */
  server_cpu_ms_per_turn: number | null;
  server_cpu_cores: number | null;
  /** Every HTTP request the engines received in the window (scrapes aside) ÷ turns; null on engines that do not count them. */
  engine_requests_per_turn: number | null;
  /** Those requests by route over the window. */
  engine_requests_by_route: Record<string, number>;
  /** Set on a token-mode row when the same case ran in chat mode in the same run: tokens ÷ chat. */
  tokens_over_chat: ModeRatios | null;
  event_loop_lag_p99_ms: number | null;
  event_loop_lag_max_ms: number | null;
  /** VmHWM of the serve process after the drain. */
  server_rss_peak_bytes: number | null;
  /** VmRSS of the serve process after the drain. */
  server_rss_bytes: number | null;
  /** The RSS bound of docs/server.md at this case's settings (null for an attached server). */
  server_rss_bound_bytes: number | null;
  server_rss_bound_derivation: string | null;
  /** How serve was started: ROLLGYM_RUNTIME and NODE_OPTIONS as the bench passed them on (null: attached). */
  server_runtime: { rollgym_runtime: string; node_options: string } | null;
  engine_cpu_cores: number | null;
  bench_cpu_cores: number;
  load_generator: {
    tokens_per_s: number;
    requests_per_s: number;
    engine_running_mean: number | null;
    window_s: number;
    failures: number;
    /** The first failed request's error, if any (the generator waits 100 ms and goes on). */
    first_error: string | null;
  } | null;
  saturation_ratio: number | null;
  /**
   * The floor clients with the load generator's bodies at the same concurrency, each in its own
   * process (CPU per request is theirs alone); null when not run (token mode, --no-floor).
   */
  floor: Record<"raw" | "undici", FloorResult | null> | null;
  /** Server CPU per request ÷ each floor client's CPU per request. */
  server_over_floor: { raw: number | null; undici: number | null } | null;
  /**
   * How long the /metrics reads at the window's start and end took, ms: the engines' counters
   * are as of their answer, so answers much slower than the server's (an engine short of CPU)
   * shift the engine-side figures (requests, tokens, requests per turn) against the window.
   */
  metrics_answer_ms: { start: { engines: number; server: number }; end: { engines: number; server: number } };
  episodes_total: number;
  episodes_finished: number;
  episodes_failed: number;
  wall_s: number;
}

export const MOCK_MODEL = "rollgym-bench";
/** What rollgym's policy sends as the assistant prefill with think on (rollgym.llm.prefill=continue). */
const PREFILL = "<think>";
/** A rollout's groups are capped by the protocol (MAX_GROUPS) and kept well inside it. */
const MAX_ROLLOUT_GROUPS = 50_000;

interface Snapshot {
  at: number;
  serverCpu: number | null;
  engineCpu: number | null;
  benchCpu: number;
  engine: EngineCounters;
  server: Map<string, number>;
  /** How long the engines' and the server's /metrics took to answer, ms. */
  answeredMs: { engines: number; server: number };
}

export async function runCase(
  settings: BenchSettings,
  bench: BenchCase,
  progress: Progress,
): Promise<CaseResult> {
  const started = performance.now();
  const groupsInFlight = bench.episodes / settings.groupSize;
  const perClient = groupsInFlight / settings.clients;
  const children: Child[] = [];
  const trainers: TrainerClient[] = [];
  try {
    // Engines.
    let urls: string[];
    let description: string;
    if (settings.llm) {
      urls = settings.llm;
      description = `real engines (${urls.join(", ")})`;
    } else {
      const model = bench.latencyModel ?? "default";
      // Token mode renders through the engine's chat template, with the real Qwen3 tokenizer as
      // bench/tokens.ts runs it; chat mode keeps the fast toy tokenizer it only counts with.
      const engines = await startMockEngines(bench.replicas, MOCK_MODEL, [
        "--latency-model",
        model,
        ...(bench.mode === "tokens" ? ["--tokenizer", "qwen3"] : []),
      ]);
      children.push(...engines);
      urls = engines.map((e) => e.url);
      description = describeLatencyModel(LATENCY_PRESETS[model]);
    }
    // Every engine read goes over a connection opened now and kept open (prometheus.ts).
    scrapeConnections.keep(urls.map(engineMetricsUrl));
    const enginesCpu = () => {
      const engines = children.filter((c) => c.name.startsWith("mock engine"));
      if (engines.length === 0) return null;
      return engines.reduce((sum, e) => sum + (cpuSeconds(e.pid) ?? 0), 0);
    };

    // The server.
    let serverUrl: string;
    let serverPid: number | null;
    if (settings.server) {
      serverUrl = settings.server.replace(/\/+$/, "");
      serverPid = settings.serverPid;
    } else {
      const server = await startServe(
        urls,
        settings.llm ? settings.model : MOCK_MODEL,
        perClient,
        [
          // The trainers ack every group at once; the bound must never be what holds a rollout back.
          "--max-buffered-groups",
          String(bufferedGroups(perClient)),
          `rollgym.llm.concurrency=${bench.episodes}`,
          `rollgym.limits.max_groups_per_rollout=${MAX_ROLLOUT_GROUPS}`,
          `rollgym.limits.max_episodes_in_flight=${MAX_ROLLOUT_GROUPS * settings.groupSize * settings.clients * 2}`,
        ],
        settings.serveFrom === null ? undefined : rollgymEntry(settings.serveFrom),
      );
      children.push(server);
      serverUrl = server.url;
      serverPid = server.pid;
    }

    const snapshot = async (): Promise<Snapshot> => {
      const at = performance.now();
      const serverCpu = serverPid === null ? null : cpuSeconds(serverPid);
      const engine = enginesCpu();
      const usage = process.cpuUsage();
      const timed = async <T>(read: Promise<T>): Promise<[T, number]> => [await read, performance.now() - at];
      const [[counters, enginesMs], [server, serverMs]] = await Promise.all([
        timed(scrapeEngines(urls)),
        timed(scrape(`${serverUrl}/metrics`)),
      ]);
      return {
        answeredMs: { engines: round(enginesMs, 1), server: round(serverMs, 1) },
        at,
        serverCpu,
        engineCpu: engine,
        benchCpu: (usage.user + usage.system) / 1e6,
        engine: counters,
        server,
      };
    };

    for (let i = 0; i < settings.clients; i++) {
      trainers.push(await TrainerClient.connect(serverUrl, { token: settings.token, credit: perClient * 4 }));
    }
    // The generator's requests: every turn's chat of some episodes, played the way the server plays them.
    const model = settings.llm ? settings.model : MOCK_MODEL;
    const floorRuns = settings.floor && bench.mode === "chat";
    const prompts =
      settings.saturation || floorRuns
        ? await trainers[0].promptMix(
            settings.tag,
            Math.min(64, bench.episodes),
            settings.seed,
            settings.maxTurn,
            (m) => chatOnce(urls[0], { model, maxTokens: settings.maxTokens, prefill: PREFILL }, m),
          )
        : [];
    const label = `${bench.mode}, ${bench.episodes} in flight, ${bench.replicas} replica${bench.replicas > 1 ? "s" : ""}${bench.latencyModel ? `, ${bench.latencyModel}` : ""}`;

    // Warm-up: one wave of groups, which also tells how long a group takes under this load.
    const outcomes: RolloutResult[] = [];
    let nextSeed = settings.seed;
    const seeds = (groups: number) => () => {
      const seed = nextSeed;
      nextSeed += groups;
      return seed;
    };
    const warm = await playRollouts(
      trainers,
      settings,
      { groups: perClient, slots: perClient, name: "warm", nextSeed: seeds(perClient), mode: bench.mode },
      {
        onProgress: (done, total) => progress.update(`${label}: warm-up`, done, total),
      },
    );
    outcomes.push(...warm.results);
    const groupSeconds = Math.max(0.01, median(warm.latenciesMs) / 1000);

    // The measured rollouts: a first wave, the window, a last wave that drains.
    // A margin over the warm-up's estimate: the window ends at --duration anyway.
    const waves = 2 + Math.ceil((1.25 * settings.durationS) / groupSeconds);
    const groups = Math.min(MAX_ROLLOUT_GROUPS, perClient * waves);
    let windowStart: Snapshot | null = null;
    let windowEnd: Snapshot | null = null;
    let startPending: Promise<Snapshot> | null = null;
    let endPending: Promise<Snapshot> | null = null;
    let windowStartAt = 0;
    const inWindow: number[] = [];
    let runningMean: number | null = null;
    const running = new RunningSampler(urls);
    const measured = await playRollouts(
      trainers,
      settings,
      { groups, slots: perClient, name: "run", nextSeed: seeds(groups), mode: bench.mode },
      {
        onProgress: (done, total) =>
          progress.update(
            `${label}: ${endPending ? "drain" : startPending ? "measuring" : "ramp-up"}`,
            done,
            total,
          ),
        onGroup: (latencyMs, at, doneAll, doneMin) => {
          if (!startPending && doneAll >= groupsInFlight) {
            windowStartAt = at;
            startPending = settled(snapshot());
            running.start();
            // Reading the server's /metrics resets its event-loop histogram: the end reading covers the window.
          }
          if (startPending && !endPending) {
            // The window ends on a whole number of waves (groups started together tend to finish
            // together, so a window cut mid-wave would over- or under-count), once --duration has
            // passed or before any rollout's queue runs dry.
            const waveDone = doneAll % groupsInFlight === 0;
            const queueEnding =
              doneMin >= groups - perClient || doneAll >= groups * trainers.length - groupsInFlight;
            const timeUp = at - windowStartAt >= settings.durationS * 1000;
            if (queueEnding || (timeUp && waveDone)) {
              endPending = settled(snapshot());
              runningMean = running.stop();
            } else inWindow.push(latencyMs);
          }
        },
      },
    );
    outcomes.push(...measured.results);
    windowStart = await (startPending ?? snapshot());
    windowEnd = await (endPending ?? snapshot());
    const memory = serverPid === null ? null : memoryOf(serverPid);
    // The server goes before the load generator: its idle engine connections would otherwise
    // count against the engine's file limit next to the generator's (10,240 each at the top case).
    for (const t of trainers.splice(0)) t.close();
    await children.find((c) => c.name === "rollgym serve")?.stop();

    // The plain load generator at the same concurrency, over a window as long.
    const windowS = (windowEnd.at - windowStart.at) / 1000;
    let load: CaseResult["load_generator"] = null;
    if (settings.saturation && prompts.length > 0) {
      load = await measureLoad(
        urls,
        settings,
        bench.episodes,
        prompts,
        windowS,
        async () => {
          const at = performance.now();
          return { at, counters: await scrapeEngines(urls) };
        },
        (done, phase) => progress.update(`${label}: load generator ${phase}`, done, null),
      );
    }

    // The floor: the same bodies as the generator, at the same concurrency, for as long.
    let floor: CaseResult["floor"] = null;
    if (floorRuns && prompts.length > 0) {
      const bodies = chatBodies({ model, maxTokens: settings.maxTokens, prefill: PREFILL }, prompts);
      floor = { raw: null, undici: null };
      for (const client of FLOOR_CLIENTS) {
        progress.update(`${label}: floor (${client})`, 0, null);
        floor[client] = await runFloorChild({
          client,
          urls,
          bodies,
          concurrency: bench.episodes,
          windowS,
        });
      }
    }

    const delta = (key: string) => (windowEnd.server.get(key) ?? 0) - (windowStart.server.get(key) ?? 0);
    const requests = windowEnd.engine.requests - windowStart.engine.requests;
    const tokensPerS = (windowEnd.engine.generatedTokens - windowStart.engine.generatedTokens) / windowS;
    const serverCpu =
      windowEnd.serverCpu !== null && windowStart.serverCpu !== null
        ? windowEnd.serverCpu - windowStart.serverCpu
        : null;
    const engineCpu =
      windowEnd.engineCpu !== null && windowStart.engineCpu !== null
        ? windowEnd.engineCpu - windowStart.engineCpu
        : null;
    const lag = (key: string) => {
      const v = windowEnd.server.get(key);
      return v === undefined ? null : round(v * 1000, 1);
    };
    const turns = delta("rollgym_turns_total");
    const engineStart = engineRequests(windowStart.engine);
    const engineEnd = engineRequests(windowEnd.engine);
    const byRoute: Record<string, number> = {};
    for (const [route, n] of Object.entries(windowEnd.engine.routes)) {
      const d = n - (windowStart.engine.routes[route] ?? 0);
      if (d > 0) byRoute[route] = d;
    }
    const serverCpuMsPerRequest =
      serverCpu === null || requests === 0 ? null : round((serverCpu / requests) * 1000, 4);
    const over = (f: FloorResult | null | undefined) =>
      serverCpuMsPerRequest === null || !f?.cpu_ms_per_request
        ? null
        : round(serverCpuMsPerRequest / f.cpu_ms_per_request, 2);
    const bound = settings.server
      ? null
      : rssBound({
          episodes: bench.episodes,
          groupSize: settings.groupSize,
          clients: settings.clients,
          bufferedGroups: bufferedGroups(perClient),
          // rollgym.llm.concurrency as the bench gives serve, per replica.
          engineRequests: bench.episodes * (settings.llm ? settings.llm.length : bench.replicas),
          tokenLogIds: bench.mode === "tokens" ? Math.max(warm.longestLog, measured.longestLog) : null,
        });
    const sorted = [...inWindow].sort((a, b) => a - b);
    const total = outcomes.reduce((n, o) => n + o.episodes, 0);
    const failed = outcomes.reduce((n, o) => n + o.failed, 0);
    return {
      mode: bench.mode,
      episodes_in_flight: bench.episodes,
      replicas: settings.llm ? settings.llm.length : bench.replicas,
      latency_model: bench.latencyModel ?? "real",
      latency_model_description: description,
      clients: settings.clients,
      group_size: settings.groupSize,
      group_concurrency: perClient,
      max_turn: settings.maxTurn,
      max_tokens: settings.maxTokens,
      window_s: round(windowS, 2),
      episodes_per_s: round(delta("rollgym_episodes_total") / windowS, 1),
      turns_per_s: round(delta("rollgym_turns_total") / windowS, 1),
      requests_per_s: round(requests / windowS, 1),
      tokens_per_s: round(tokensPerS, 1),
      engine_running_mean: runningMean ?? running.stop(),
      group_latency_ms: {
        p50: round(quantile(sorted, 0.5), 1),
        p99: round(quantile(sorted, 0.99), 1),
        max: round(sorted[sorted.length - 1] ?? 0, 1),
        groups: sorted.length,
      },
      server_cpu_ms_per_request: serverCpuMsPerRequest,
      server_cpu_ms_per_turn: serverCpu === null || turns === 0 ? null : round((serverCpu / turns) * 1000, 4),
      server_cpu_cores: serverCpu === null ? null : round(serverCpu / windowS, 3),
      engine_requests_per_turn:
        engineStart === null || engineEnd === null || turns === 0
          ? null
          : round((engineEnd - engineStart) / turns, 3),
      engine_requests_by_route: byRoute,
      tokens_over_chat: null,
      event_loop_lag_p99_ms: lag("nodejs_eventloop_lag_p99_seconds"),
      event_loop_lag_max_ms: lag("nodejs_eventloop_lag_max_seconds"),
      server_rss_peak_bytes: memory?.peak ?? null,
      server_rss_bytes: memory?.rss ?? null,
      server_rss_bound_bytes: bound?.bytes ?? null,
      server_rss_bound_derivation: bound?.derivation ?? null,
      server_runtime: settings.server
        ? null
        : {
            rollgym_runtime: process.env.ROLLGYM_RUNTIME ?? "",
            node_options: process.env.NODE_OPTIONS ?? "",
          },
      engine_cpu_cores: engineCpu === null ? null : round(engineCpu / windowS, 3),
      bench_cpu_cores: round((windowEnd.benchCpu - windowStart.benchCpu) / windowS, 3),
      load_generator: load,
      saturation_ratio: load && load.tokens_per_s > 0 ? round(tokensPerS / load.tokens_per_s, 3) : null,
      floor,
      server_over_floor: floor ? { raw: over(floor.raw), undici: over(floor.undici) } : null,
      metrics_answer_ms: { start: windowStart.answeredMs, end: windowEnd.answeredMs },
      episodes_total: total,
      episodes_finished: total - failed,
      episodes_failed: failed,
      wall_s: round((performance.now() - started) / 1000, 1),
    };
  } finally {
    for (const t of trainers) t.close();
    await scrapeConnections.close();
    await stopAll(children);
  }
}

interface Played {
  results: RolloutResult[];
  /** Per group: arrival − start, where a group starts at the send (first wave) or when its predecessor in the slot arrived. */
  latenciesMs: number[];
  /** Ids in the longest token log any group frame carried (token mode; 0 in chat mode). */
  longestLog: number;
}

/**
 * Every trainer plays one stream rollout of `groups` groups. The server starts a rollout's
 * groups in id order and a new one whenever one finishes, so the k-th group to arrive freed the
 * slot of group `perClient + k`: that arrival is the later group's start.
 */
async function playRollouts(
  trainers: readonly TrainerClient[],
  settings: BenchSettings,
  shape: { groups: number; slots: number; name: string; nextSeed: () => number; mode: BenchMode },
  hooks: {
    onProgress: (done: number, total: number) => void;
    onGroup?: (latencyMs: number, at: number, doneAll: number, doneMin: number) => void;
  },
): Promise<Played> {
  const latencies: number[] = [];
  let longestLog = 0;
  const done = trainers.map(() => 0);
  let doneAll = 0;
  const sent = performance.now();
  const results = await Promise.all(
    trainers.map((trainer, i) => {
      const id = `${shape.name}-${i}`;
      const arrivals: number[] = [];
      trainer.onGroup = (group: ArrivedGroup) => {
        if (group.rollout !== id) return;
        const slot = group.group - shape.slots;
        const start = slot < 0 ? sent : (arrivals[slot] ?? sent);
        arrivals.push(group.at);
        done[i]++;
        doneAll++;
        const latency = group.at - start;
        latencies.push(latency);
        longestLog = Math.max(longestLog, group.longestLog);
        hooks.onGroup?.(latency, group.at, doneAll, Math.min(...done));
        hooks.onProgress(doneAll, shape.groups * trainers.length);
      };
      return trainer.rollout({
        id,
        tag: settings.tag,
        groups: shape.groups,
        groupSize: settings.groupSize,
        seed: shape.nextSeed(),
        maxTurn: settings.maxTurn,
        maxTokens: settings.maxTokens,
        tokens: shape.mode === "tokens",
      });
    }),
  );
  return { results, latenciesMs: latencies, longestLog };
}

async function measureLoad(
  urls: string[],
  settings: BenchSettings,
  concurrency: number,
  prompts: ChatMessages[],
  windowS: number,
  read: () => Promise<{ at: number; counters: EngineCounters }>,
  onProgress: (done: number, phase: string) => void,
): Promise<NonNullable<CaseResult["load_generator"]>> {
  let responses = 0;
  let start: Promise<{ at: number; counters: EngineCounters }> | null = null;
  let end: Promise<{ at: number; counters: EngineCounters }> | null = null;
  let startAt = 0;
  const running = new RunningSampler(urls);
  let runningMean: number | null = null;
  const result = await generateLoad({
    urls,
    model: settings.llm ? settings.model : MOCK_MODEL,
    prompts,
    maxTokens: settings.maxTokens,
    concurrency,
    prefill: PREFILL,
    stopped: () => end !== null,
    onResponse: () => {
      responses++;
      const now = performance.now();
      // Warm: every loop has had an answer, so all of them are in the engine's batch.
      if (!start && responses >= concurrency) {
        startAt = now;
        start = read();
        running.start();
      }
      if (start && !end && now - startAt >= windowS * 1000) {
        end = read();
        runningMean = running.stop();
      }
      onProgress(responses, end ? "drain" : start ? "measuring" : "warm-up");
    },
  });
  const a = await (start ?? read());
  const b = await (end ?? read());
  const seconds = (b.at - a.at) / 1000;
  return {
    tokens_per_s: round((b.counters.generatedTokens - a.counters.generatedTokens) / seconds, 1),
    requests_per_s: round((b.counters.requests - a.counters.requests) / seconds, 1),
    engine_running_mean: runningMean ?? running.stop(),
    window_s: round(seconds, 2),
    failures: result.failures,
    first_error: result.firstError,
  };
}

/** serve's --max-buffered-groups for a rollout of `perClient` groups at once. */
function bufferedGroups(perClient: number): number {
  return Math.max(64, perClient * 2);
}

/**
 * Fills in each token-mode row's ratios to the chat-mode row of the same case (same episodes,
 * replicas and latency model) in `results`.
 */
export function pairModes(results: readonly CaseResult[]): void {
  const ratio = (a: number | null, b: number | null) =>
    a === null || b === null || b === 0 ? null : round(a / b, 3);
  for (const tokens of results) {
    if (tokens.mode !== "tokens") continue;
    const chat = results.find(
      (r) =>
        r.mode === "chat" &&
        r.episodes_in_flight === tokens.episodes_in_flight &&
        r.replicas === tokens.replicas &&
        r.latency_model === tokens.latency_model,
    );
    if (!chat) continue;
    tokens.tokens_over_chat = {
      server_cpu_per_turn: ratio(tokens.server_cpu_ms_per_turn, chat.server_cpu_ms_per_turn),
      engine_requests_per_turn: ratio(tokens.engine_requests_per_turn, chat.engine_requests_per_turn),
    };
  }
}

/** The same promise, with its rejection marked handled until it is awaited (the rollout runs on meanwhile). */
function settled<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {});
  return promise;
}
