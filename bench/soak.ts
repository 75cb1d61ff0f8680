// The soak (issue #10): a `rollgym serve` child process under a mix of clients for N minutes,
// its RSS sampled every 2 s from /proc. After the warm-up (1 minute, or until every kind of
// dose has run once, whichever is later) the RSS slope (least squares) must be within its
// standard error of 0. Clients:
// - well-behaved trainers: stream and batch rollouts back to back, credit and acks, every group
//   checked to arrive exactly once;
// - slow trainers: credit one group at a time, late, and stop reading for seconds at a time;
// - silent sockets: bare TCP connections, half-sent upgrades, WebSockets that never say hello,
//   and clients that say hello and nothing more;
// - hostile clients: random bad frames, and issue #10's attacks in small doses (a session at
//   the budget, 1 MB responses, unacknowledged groups, a flood without reading, cancelling a
//   paused stream, reusing a rollout id, junk bytes), and issue #19's limits: an env session
//   filled until the memory budget refuses, max_watchers + 1 watchers, frames that are costly to
//   decode (paced) and frames that would decode past the bound (closed).
// A bystander process (bench/attacks/prober.ts) polls /healthz every 50 ms throughout.
// Usage: node bench/soak.ts [--minutes 10] [--json FILE]
import { writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import seedrandom from "seedrandom";
import { encodeMessage } from "../protocol/codec.ts";
import {
  type Client,
  connect,
  connectSilent,
  type Pacing,
  playRollout,
  RolloutRefused,
  rawSocket,
  sleep,
} from "./attacks/client.ts";
import { MiB, startProber, startServe } from "./attacks/server.ts";

const { values } = parseArgs({
  options: { minutes: { type: "string", default: "10" }, json: { type: "string" } },
});
const minutes = Number(values.minutes);
if (!(minutes > 0)) throw new Error(`--minutes must be a positive number, got ${values.minutes}`);
/** The warm-up's shortest length; it lasts until the last of firstDoses has finished. */
const WARMUP_S = Math.min(60, minutes * 20);
const SAMPLE_MS = 2000;

const rng = seedrandom("soak");
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)];

const serve = await startServe();
const url = serve.url;
const endAt = Date.now() + minutes * 60_000;
const running = () => Date.now() < endAt;

/** Hostile doses with their time span (s after start), to match against slow /healthz answers. */
const doses: { dose: string; from: number; to: number }[] = [];
const start = Date.now();
const stats = {
  groupsDelivered: 0,
  goodRollouts: 0,
  goodRefused: 0,
  goodProblems: [] as string[],
  slowRollouts: 0,
  silentOpened: 0,
  hostileFrames: 0,
  errorsSeen: new Map<string, number>(),
  closesSeen: new Map<number, number>(),
};
const countError = (code: unknown) =>
  stats.errorsSeen.set(String(code), (stats.errorsSeen.get(String(code)) ?? 0) + 1);
const countClose = (c: Client) => {
  if (c.closeCode !== null) stats.closesSeen.set(c.closeCode, (stats.closesSeen.get(c.closeCode) ?? 0) + 1);
};

/** Connects, retrying while the server refuses (it may be at a connection cap). */
async function connectRetry(name: string): Promise<Client> {
  for (;;) {
    try {
      return await connect(url, name);
    } catch {
      await sleep(500);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Well-behaved and slow trainers
// ---------------------------------------------------------------------------------------------

async function trainer(index: number, slow: boolean): Promise<void> {
  const name = `${slow ? "slow" : "good"}${index}`;
  let c = await connectRetry(name);
  for (let i = 0; running(); i++) {
    if (c.closeCode !== null) {
      countClose(c);
      c = await connectRetry(name);
    }
    const id = `r${i}`;
    const shape = {
      tag: pick(["SimpleSokoban", "Bandit", "CoordSokoban"]),
      groups: slow ? 16 : 8,
      groupSize: 4,
      seed: i * 1000 + index,
      delivery: slow || i % 2 === 0 ? ("stream" as const) : ("batch" as const),
    };
    const client = c;
    // Slow trainers credit one group at a time and ack late, and now and then stop reading.
    const pacing: Pacing = slow
      ? {
          credit: 1,
          beforeAck: () => sleep(100 + rng() * 300),
          meanwhile:
            rng() < 0.5
              ? async () => {
                  await sleep(rng() * 1000);
                  client.pauseReading();
                  await sleep(1000 + rng() * 4000);
                  client.resumeReading();
                }
              : undefined,
        }
      : { credit: 8 };
    try {
      const delivered = await playRollout(c, id, 120_000, shape, pacing);
      stats.groupsDelivered += delivered;
      if (slow) stats.slowRollouts++;
      else stats.goodRollouts++;
    } catch (error) {
      if (error instanceof RolloutRefused) {
        countError(error.code);
        stats.goodRefused++;
        await sleep(1000);
      } else if (c.closeCode === null) {
        // A closed connection (a limit or a restart) is reconnected; anything else is a problem.
        stats.goodProblems.push(`${id}: ${error instanceof Error ? error.message : String(error)}`);
      }
      continue;
    }
    // A trainer between steps (a real one spends this time on the gradient update).
    if (!slow) await sleep(500 + rng() * 500);
  }
  c.close();
}

// ---------------------------------------------------------------------------------------------
// Silent sockets
// ---------------------------------------------------------------------------------------------

async function silent(): Promise<void> {
  while (running()) {
    const held: (() => void)[] = [];
    const tries: Promise<void>[] = [];
    for (let i = 0; i < 20; i++) {
      tries.push(
        rawSocket(url).then((s) => {
          s.on("error", () => {});
          if (i % 2) s.write("GET /v1/rollouts HTTP/1.1\r\nHost: x\r\n");
          held.push(() => s.destroy());
        }),
        connectSilent(url).then((c) => {
          held.push(() => c.ws.terminate());
        }),
        connect(url, "hello-only").then((c) => {
          held.push(() => c.ws.terminate());
        }),
      );
    }
    const settled = await Promise.allSettled(tries);
    stats.silentOpened += settled.filter((s) => s.status === "fulfilled").length;
    await sleep(10_000 + rng() * 10_000);
    for (const close of held) close();
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile clients
// ---------------------------------------------------------------------------------------------

const junkValues = [null, -1, 1e308, "", "x".repeat(300), [], {}, true, 3.5, [1, 2], { a: 1 }, 2 ** 40];
const validFrames: Record<string, unknown>[] = [
  {
    type: "rollout",
    id: "x",
    tags: [{ tag: "Bandit", groups: 2 }],
    mode: "train",
    group_size: 2,
    delivery: "batch",
  },
  { type: "credit", groups: 1 },
  { type: "ack", rollout: "x", groups: [0] },
  { type: "cancel", rollout: "x" },
  { type: "env_open", id: "e", tag: "Bandit", groups: 1, group_size: 1 },
  { type: "env_step", id: "e", responses: [{ env_id: 0, text: "<answer>1</answer>" }] },
  { type: "env_close", id: "e" },
];

function randomBadFrame(): Uint8Array | string {
  const kind = Math.floor(rng() * 6);
  if (kind === 0) return "text frame";
  if (kind === 1)
    return Uint8Array.from({ length: 1 + Math.floor(rng() * 30) }, () => Math.floor(rng() * 256));
  const base = { ...pick(validFrames) };
  const keys = Object.keys(base).filter((k) => k !== "type");
  if (kind === 2) base[pick(keys)] = pick(junkValues);
  if (kind === 3) base.type = pick(["rolout", "ACK", "bye", ""]);
  if (kind === 4) delete base[pick(keys)];
  return encodeMessage(base);
}

/**
 * The warm-up: the two hostile clients take these in step, so every kind of dose runs, and the
 * heaviest run side by side (the worst overlap the random part can bring), twice. RSS is a
 * high-water mark (V8 and malloc keep freed pages for reuse), so after the warm-up it measures
 * growth, not a peak not yet reached. Then doses come at random.
 */
const firstDoses = [
  ...["budget", "budget", "flood", "flood", "budget", "flood", "cancel", "cancel"],
  ...["budget", "budget", "flood", "flood", "parser", "parser", "unacked", "reuse", "bad", "bad"],
  ...["memory", "memory", "watchers", "costly"],
];

/** Frames of empty maps, the costliest bytes to decode: 200,000 (within every bound: the server paces its sender) and a million (refused before decoding, 1002). */
const emptyMaps = (n: number) =>
  encodeMessage({ type: "credit", groups: 1, xs: Array.from({ length: n }, () => ({})) });
const costlyFrame = emptyMaps(200_000);
const expandingFrame = emptyMaps(1_000_000);

/** One dose of one of #10's attacks, or a burst of bad frames; true when it was one of firstDoses. */
async function hostileDose(): Promise<boolean> {
  const c = await connect(url, "hostile").catch(() => null);
  if (!c) return false;
  const first = firstDoses.shift();
  const dose =
    first ??
    pick([
      "bad",
      "bad",
      "budget",
      "parser",
      "unacked",
      "flood",
      "cancel",
      "reuse",
      "memory",
      "watchers",
      "costly",
    ]);
  const began = (Date.now() - start) / 1000;
  try {
    switch (dose) {
      case "bad":
        for (let i = 0; i < 50 && c.closeCode === null; i++) {
          const f = randomBadFrame();
          c.ws.send(f, { binary: typeof f !== "string" });
          stats.hostileFrames++;
          await sleep(5);
        }
        break;
      case "budget": {
        c.send({ type: "env_open", id: "big", tag: "SimpleSokoban", groups: 4096, group_size: 4096 });
        c.send({ type: "env_open", id: "share", tag: "SimpleSokoban", groups: 512, group_size: 8 });
        await c.next((f) => f.id === "share", 60_000).catch(() => null);
        break;
      }
      case "parser": {
        c.send({ type: "env_open", id: "p", tag: "SimpleSokoban", groups: 1, group_size: 1 });
        const opened = await c.next((f) => f.id === "p", 30_000);
        if (opened.type === "env_opened") {
          const envId = (opened.episodes as { env_id: number }[])[0].env_id;
          c.send({
            type: "env_step",
            id: "p",
            responses: [{ env_id: envId, text: "</think><think>".repeat(60_000) }],
          });
          await c.next((f) => f.id === "p" && f.type !== "env_opened", 30_000).catch(() => null);
        }
        break;
      }
      case "unacked":
        c.send({ type: "credit", groups: 1000 });
        c.send({
          type: "rollout",
          id: "u",
          tags: [{ tag: "Bandit", groups: 64 }],
          mode: "train",
          group_size: 4,
          delivery: "batch",
        });
        await c
          .next((f) => f.rollout === "u" && (f.type === "batch" || f.type === "error"), 60_000)
          .catch(() => null);
        break;
      case "flood": {
        c.pauseReading();
        const stop = Date.now() + 3000;
        for (let i = 0; Date.now() < stop && c.closeCode === null; i++) {
          if (c.ws.bufferedAmount < MiB) {
            c.send({ type: "env_open", id: `f${i}`, tag: "Bandit", groups: 1, group_size: 1 });
            c.send({ type: "env_close", id: `f${i}` });
          } else await sleep(10);
          if (i % 100 === 0) await sleep(1);
        }
        break;
      }
      case "cancel":
        c.send({
          type: "rollout",
          id: "p",
          tags: [{ tag: "SimpleSokoban", groups: 1024 }],
          mode: "train",
          group_size: 8,
          delivery: "stream",
        });
        await sleep(2000);
        c.send({ type: "cancel", rollout: "p" });
        c.send({ type: "credit", groups: 10_000 });
        await c
          .next((f) => f.rollout === "p" && (f.type === "batch" || f.type === "error"), 60_000)
          .catch(() => null);
        break;
      case "memory": {
        // 900 kB turns until the memory budget (the session's share, or the total) refuses.
        c.send({ type: "env_open", id: "m", tag: "FrozenLake", groups: 1, group_size: 16, max_turn: 1000 });
        await c.next((f) => f.id === "m", 30_000);
        const text = "x".repeat(900_000);
        for (let turn = 0; turn < 400 && c.closeCode === null; turn++) {
          const from = c.received.length;
          c.send({ type: "env_step", id: "m", responses: [{ env_id: turn % 16, text }] });
          const r = await c.next((f) => f.id === "m" && c.received.indexOf(f) >= from, 30_000);
          if (r.type === "error") break;
        }
        break;
      }
      case "watchers": {
        const watchers = await Promise.all(
          Array.from({ length: 33 }, () => connect(url, "watcher").catch(() => null)),
        );
        for (const w of watchers) w?.send({ type: "watch" });
        await Promise.all(
          watchers.map((w) =>
            w?.next((f) => f.type === "watching" || f.type === "error", 10_000).catch(() => null),
          ),
        );
        await sleep(2000);
        for (const w of watchers) {
          if (!w) continue;
          for (const e of w.of("error")) countError(e.code);
          w.ws.terminate();
        }
        break;
      }
      case "costly":
        for (let i = 0; i < 3 && c.closeCode === null; i++) c.ws.send(costlyFrame);
        await c.next((f) => f.type === "error" && c.of("error").length >= 3, 60_000).catch(() => null);
        if (c.closeCode === null) c.ws.send(expandingFrame);
        await Promise.race([c.closed(), sleep(10_000)]);
        break;
      case "reuse":
        c.send({
          type: "rollout",
          id: "r",
          tags: [{ tag: "Bandit", groups: 4 }],
          mode: "train",
          group_size: 2,
          delivery: "batch",
        });
        await sleep(500);
        c.send({ type: "ack", rollout: "r", groups: [], batch: true });
        c.send({
          type: "rollout",
          id: "r",
          tags: [{ tag: "Bandit", groups: 4 }],
          mode: "train",
          group_size: 2,
          delivery: "batch",
        });
        c.send({ type: "credit", groups: 100 });
        await sleep(1000);
        break;
    }
  } catch {
    // A hostile client's own waits may time out; what matters is the server.
  }
  await sleep(200);
  doses.push({ dose, from: began, to: (Date.now() - start) / 1000 });
  for (const e of c.of("error")) countError(e.code);
  countClose(c);
  c.ws.terminate();
  return first !== undefined;
}

/** First doses not yet finished, and when the last one finished (s): the warm-up's end. */
let firstDosesLeft = firstDoses.length;
let firstDosesDoneS = Number.NaN;

async function hostile(): Promise<void> {
  while (running()) {
    const first = await hostileDose();
    if (first && --firstDosesLeft === 0) firstDosesDoneS = (Date.now() - start) / 1000;
    if (!first) await sleep(rng() * 2000);
  }
}

// ---------------------------------------------------------------------------------------------

const samples: { t: number; rss: number }[] = [];
/** The server's V8 heap in use plus external memory (from /metrics), to tell a leak from heap sizing. */
const heapSamples: { t: number; rss: number }[] = [];
const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
const heapSampler = setInterval(async () => {
  const t = (Date.now() - start) / 1000;
  const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })
    .then((r) => r.text())
    .catch(() => "");
  const used = metric(text, "nodejs_heap_size_used_bytes") + metric(text, "nodejs_external_memory_bytes");
  if (Number.isFinite(used)) heapSamples.push({ t, rss: used });
}, 10_000);
const sampler = setInterval(
  () => samples.push({ t: (Date.now() - start) / 1000, rss: serve.rss() }),
  SAMPLE_MS,
);
const proberOffset = (Date.now() - start) / 1000;
const prober = startProber(url);
console.log(`soak: ${minutes} min against ${url} (server pid ${serve.pid}); warm-up ${WARMUP_S} s`);
const progress = setInterval(() => {
  const last = samples.at(-1);
  console.log(
    `${Math.round((Date.now() - start) / 1000)} s: RSS ${last ? (last.rss / MiB).toFixed(0) : "?"} MiB, groups ${stats.groupsDelivered}, good rollouts ${stats.goodRollouts}, slow ${stats.slowRollouts}`,
  );
}, 60_000);

await Promise.all([
  ...[0, 1, 2, 3].map((i) => trainer(i, false)),
  ...[0, 1].map((i) => trainer(i, true)),
  silent(),
  hostile(),
  hostile(),
]);
clearInterval(sampler);
clearInterval(heapSampler);
clearInterval(progress);
const probe = await prober.stop();
const up = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) }).then(
  (r) => r.ok,
  () => false,
);
const hwm = serve.hwm();
await serve.stop();

/** RSS at the end of each minute. */
function perMinute(points: { t: number; rss: number }[]): number[] {
  const out: number[] = [];
  for (let m = 1; m <= Math.ceil(minutes); m++) {
    const last = points.filter((p) => p.t <= m * 60).at(-1);
    if (last) out.push(Math.round(last.rss / MiB));
  }
  return out;
}

/**
 * Least-squares slope of RSS (MiB) over time (min), for samples after the warm-up, and its
 * standard error. RSS rises and falls with every full GC, so neighbouring samples are not
 * independent: the error is widened by the residuals' integrated autocorrelation time.
 */
function slope(points: { t: number; rss: number }[]): { slope: number; standardError: number } {
  const xs = points.map((p) => p.t / 60);
  const ys = points.map((p) => p.rss / MiB);
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  const b = num / den;
  const residuals = ys.map((y, i) => y - (my + b * (xs[i] - mx)));
  const sumSquares = residuals.reduce((a, r) => a + r * r, 0);
  let tau = 1;
  for (let lag = 1; lag < Math.min(30, n); lag++) {
    let c = 0;
    for (let i = 0; i + lag < n; i++) c += residuals[i] * residuals[i + lag];
    tau += 2 * Math.max(0, c / sumSquares);
  }
  return { slope: b, standardError: Math.sqrt((sumSquares / (n - 2) / den) * tau) };
}
// RSS keeps the highest peak so far, so the slope counts only once every kind of peak has been
// reached: the warm-up lasts at least WARMUP_S and until the first doses are done.
const warmupS = Math.max(
  WARMUP_S,
  Number.isFinite(firstDosesDoneS) ? firstDosesDoneS : Number.POSITIVE_INFINITY,
);
const after = samples.filter((s) => s.t >= warmupS && Number.isFinite(s.rss));
const { slope: rssSlope, standardError: rssSlopeError } = slope(after);
const heapAfter = heapSamples.filter((s) => s.t >= warmupS);
const heapSlope = heapAfter.length > 2 ? slope(heapAfter).slope : Number.NaN;
const summary = {
  date: new Date().toISOString(),
  minutes,
  server_up: up,
  rss_start_mib: Math.round(samples[0].rss / MiB),
  warmup_s: Math.round(warmupS),
  rss_after_warmup_mib: Math.round(after[0]?.rss / MiB),
  rss_end_mib: Math.round(samples.at(-1)!.rss / MiB),
  rss_peak_mib: Math.round(hwm / MiB),
  rss_slope_mib_per_min: Number(rssSlope.toFixed(3)),
  rss_slope_standard_error_mib_per_min: Number(rssSlopeError.toFixed(2)),
  samples_after_warmup: after.length,
  rss_per_minute_mib: perMinute(samples),
  heap_plus_external_after_warmup_mib: Math.round(heapAfter[0]?.rss / MiB),
  heap_plus_external_end_mib: Math.round((heapSamples.at(-1)?.rss ?? Number.NaN) / MiB),
  heap_plus_external_slope_mib_per_min: Number(heapSlope.toFixed(3)),
  load_average: loadavg().map((l) => Number(l.toFixed(1))),
  groups_delivered: stats.groupsDelivered,
  good_rollouts: stats.goodRollouts,
  slow_rollouts: stats.slowRollouts,
  trainer_refusals: stats.goodRefused,
  trainer_problems: stats.goodProblems.slice(0, 10),
  silent_sockets_opened: stats.silentOpened,
  hostile_bad_frames: stats.hostileFrames,
  errors_seen: Object.fromEntries(stats.errorsSeen),
  closes_seen: Object.fromEntries(stats.closesSeen),
  bystander: probe,
  // Which hostile doses were under way when the slowest /healthz requests were sent.
  slow_healthz_during: probe.healthz_slow_samples.map(([t, ms]) => ({
    sent_s: Math.round(t + proberOffset),
    ms,
    doses: doses
      .filter((d) => d.from - 2 <= t + proberOffset && t + proberOffset <= d.to + 1)
      .map((d) => d.dose),
  })),
  // Flat: the slope is within its standard error of 0 (growth, if any, is not told from the swing).
  verdict:
    up && rssSlope <= rssSlopeError && stats.goodProblems.length === 0 && probe.healthz_worst_ms < 1000
      ? "within"
      : `over:${up ? "" : " down"}${rssSlope <= rssSlopeError ? "" : " RSS slope above its standard error"}${stats.goodProblems.length ? " trainer problems" : ""}${probe.healthz_worst_ms < 1000 ? "" : " /healthz ≥ 1 s"}`,
};
console.log(JSON.stringify(summary, null, 2));
if (values.json)
  writeFileSync(
    values.json,
    `${JSON.stringify({ ...summary, samples, heap_samples: heapSamples }, null, 2)}\n`,
  );
process.exit(0);
