// The hardening benchmark (issue #10), first version: each attack runs against a fresh server
// (buildServer on 127.0.0.1:0) in its own child process, so a crash or a leak in one attack
// cannot hide another's. While the attack runs, the same process polls /healthz every 50 ms and
// samples RSS, and a well-behaved client plays a 2 × 2 built-in-policy rollout.
// Usage: node bench/attacks.ts [--only NAME,NAME] [--json FILE]
// RSS is the child's: server and attacking clients share the process (loopback only).
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { encodeMessage } from "../protocol/codec.ts";
import { buildServer, type RollgymServer, type ServerOptions } from "../src/server/app.ts";
import { type Client, connect, goodRollout, pauseReading } from "./attacks/client.ts";

const MiB = 1024 * 1024;
const ATTACK_TIMEOUT_MS = 25_000;

interface Ctx {
  url: string;
  server: RollgymServer;
  /** Expected outcomes that did not happen. */
  failures: string[];
  notes: string[];
}

interface Attack {
  name: string;
  covers: string;
  options?: ServerOptions;
  run(ctx: Ctx): Promise<void>;
}

function expect(ctx: Ctx, ok: boolean, what: string): void {
  if (!ok) ctx.failures.push(what);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function errorFor(c: Client, key: "id" | "rollout", id: string, timeoutMs = 20_000) {
  return c.next(
    (f) => f[key] === id && (f.type === "error" || f.type.endsWith("ed") || f.type === "batch"),
    timeoutMs,
  );
}

const attacks: Attack[] = [
  {
    name: "env_open_4096x4096",
    covers: "#10.1",
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "env_open", id: "huge", tag: "SimpleSokoban", groups: 4096, group_size: 4096 });
      const reply = await errorFor(c, "id", "huge");
      ctx.notes.push(`reply ${reply.type}${reply.code ? ` ${reply.code}` : ""}`);
      expect(ctx, reply.type === "error" && reply.code === "limit", "refused with limit");
      c.close();
    },
  },
  {
    name: "env_step_1MB_think",
    covers: "#10.2",
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "env_open", id: "s", tag: "SimpleSokoban", groups: 1, group_size: 1, seed: 1 });
      const opened = await c.next((f) => f.id === "s" && (f.type === "env_opened" || f.type === "error"));
      const envId = (opened.episodes as { env_id: number }[])[0].env_id;
      // 15 bytes × 66,000 = 990,000 bytes: under the 1 MiB frame limit with the envelope.
      const text = "</think><think>".repeat(66_000);
      const start = performance.now();
      c.send({ type: "env_step", id: "s", responses: [{ env_id: envId, text }] });
      const reply = await c.next((f) => f.id === "s" && (f.type === "env_stepped" || f.type === "error"));
      ctx.notes.push(`${reply.type} in ${Math.round(performance.now() - start)} ms`);
      expect(ctx, reply.type === "env_stepped", "env_stepped answered");
      c.close();
    },
  },
  {
    name: "seed_past_2^32",
    covers: "#10.10 (seeds)",
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "credit", groups: 100 });
      c.send({
        type: "rollout",
        id: "big",
        tags: [{ tag: "SimpleSokoban", groups: 8 }],
        mode: "train",
        group_size: 2,
        seed: 4294967295,
        delivery: "batch",
      });
      const r = await errorFor(c, "rollout", "big");
      c.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 2, group_size: 1, seed: 4294967295 });
      const e = await errorFor(c, "id", "e");
      await sleep(500);
      ctx.notes.push(`rollout: ${r.code ?? r.type}, env_open: ${e.code ?? e.type}`);
      expect(ctx, r.code === "bad_frame" && r.field === "seed", "rollout refused with bad_frame on seed");
      expect(ctx, e.code === "bad_frame" && e.field === "seed", "env_open refused with bad_frame on seed");
      expect(ctx, c.of("group").length === 0, "no group frames after the error");
      c.close();
    },
  },
  {
    name: "uploads_at_and_over_limits",
    covers: "#9 uploads",
    async run(ctx) {
      const limits = { maxUploadBytes: 32 * MiB, maxUploads: 16, maxUploadTotalBytes: 128 * MiB }; // docs/server.md defaults
      const header = JSON.stringify({
        type: "header",
        format: "rollgym.episodes",
        version: 1,
        mode: "train",
        seed: 1,
        group_size: 1,
        tags: [{ tag: "Bandit", groups: 1 }],
        policy: "oracle",
        settings: {},
      });
      const summary = JSON.stringify({
        type: "summary",
        episodes: 0,
        failed: 0,
        kept_groups: [],
        metrics: {},
      });
      const file = (padding: string) =>
        `${header}\n${JSON.stringify({ type: "group", group_id: 0, padding })}\n${summary}\n`;
      const base = Buffer.byteLength(file(""));
      const atLimit = file("x".repeat(limits.maxUploadBytes - base));
      const overLimit = file("x".repeat(limits.maxUploadBytes - base + 1));
      const upload = async (body: string) => {
        const res = await fetch(`${ctx.url}/v1/episode-files`, {
          method: "POST",
          headers: { "content-type": "application/x-ndjson" },
          body,
        });
        if (!res.ok) {
          await res.arrayBuffer();
          return { status: res.status, id: undefined };
        }
        return { status: res.status, id: ((await res.json()) as { id: string }).id };
      };
      const kept = async (id: string | undefined) =>
        id !== undefined && (await fetch(`${ctx.url}/v1/episode-files/uploads/${id}`)).status === 200;
      // Count: 40 small uploads, only the newest 16 are kept.
      const small: string[] = [];
      for (let i = 0; i < 40; i++) {
        const r = await upload(file(String(i)));
        if (r.status === 200 && r.id) small.push(r.id);
      }
      let keptSmall = 0;
      for (const id of small) if (await kept(id)) keptSmall++;
      expect(
        ctx,
        small.length === 40 && keptSmall === limits.maxUploads,
        `16 of 40 small uploads kept (got ${keptSmall})`,
      );
      // Size: 12 uploads of exactly 32 MiB (4 fit the 128 MiB total), then 4 one byte over.
      const big: (string | undefined)[] = [];
      let bigOk = 0;
      for (let i = 0; i < 12; i++) {
        const r = await upload(atLimit);
        if (r.status === 200) bigOk++;
        big.push(r.id);
      }
      let keptBig = 0;
      for (const id of big) if (await kept(id)) keptBig++;
      const over: number[] = [];
      for (let i = 0; i < 4; i++) over.push((await upload(overLimit)).status);
      ctx.notes.push(
        `40 small: ${keptSmall} kept; 12 × 32 MiB: ${bigOk} accepted, ${keptBig} kept; 4 × 32 MiB+1: ${over.join(",")}`,
      );
      expect(ctx, bigOk === 12 && keptBig === 4, "12 uploads at the size limit accepted, 4 kept (128 MiB)");
      expect(
        ctx,
        over.every((s) => s === 413),
        "over-size uploads get 413",
      );
    },
  },
  {
    name: "watchers_max+1_and_idle",
    covers: "#9 watch",
    async run(ctx) {
      const hub = ctx.server.state.rolloutContext.watch!;
      const clients = await Promise.all(Array.from({ length: 33 }, () => connect(ctx.url, "watcher")));
      for (const c of clients) c.send({ type: "watch" });
      await Promise.all(clients.map((c) => c.next((f) => f.type === "watching" || f.type === "error")));
      const refused = clients.filter((c) => c.of("error").some((e) => e.code === "limit")).length;
      expect(ctx, refused === 1, `1 of 33 watchers refused with limit (got ${refused})`);
      for (const c of clients) c.close();
      const deadline = Date.now() + 5000;
      while (hub.size > 0 && Date.now() < deadline) await sleep(20);
      // A watcher that never reads, while a trainer runs a 64-group stream rollout.
      const idle = await connect(ctx.url, "idle-watcher");
      idle.send({ type: "watch" });
      await idle.next((f) => f.type === "watching");
      pauseReading(idle);
      // Ten 64-group stream rollouts in turn: one alone does not fill the kernel's socket buffers.
      const trainer = await connect(ctx.url, "trainer");
      trainer.ws.on("message", () => {
        const f = trainer.received.at(-1)!;
        if (f.type === "group")
          trainer.send({ type: "ack", rollout: f.rollout, groups: [f.group as number] });
      });
      trainer.send({ type: "credit", groups: 100_000 });
      const start = performance.now();
      let complete = 0;
      for (let i = 0; i < 10; i++) {
        const id = `t${i}`;
        trainer.send({
          type: "rollout",
          id,
          tags: [{ tag: "CoordSokoban", groups: 64 }],
          mode: "train",
          group_size: 8,
          seed: 4242 + i,
          delivery: "stream",
        });
        const end = await trainer.next((f) => f.rollout === id && (f.type === "batch" || f.type === "error"));
        const groups = trainer.of("group").filter((f) => f.rollout === id).length;
        if (end.type === "batch" && groups === 64) complete++;
        trainer.send({ type: "ack", rollout: id, groups: [], batch: true });
      }
      const stats = hub.stats();
      ctx.notes.push(
        `refused ${refused}/33; trainer completed ${complete}/10 rollouts of 64 groups in ${Math.round(performance.now() - start)} ms; idle watcher buffer max ${(stats.maxBuffered / MiB).toFixed(1)} MiB, ${stats.unreported} frames lost`,
      );
      expect(ctx, complete === 10, "trainer got all 64 groups of each rollout");
      expect(ctx, stats.maxBuffered <= 4 * MiB + MiB, "watcher buffer within 4 MiB (+ one frame)");
      trainer.close();
      idle.close();
    },
  },
  {
    name: "no_read_env_open_close_flood_10s",
    covers: "#10.4",
    async run(ctx) {
      const c = await connect(ctx.url, "flooder");
      pauseReading(c);
      let sent = 0;
      let bytes = 0;
      let maxClientBuffered = 0;
      const stop = performance.now() + 10_000;
      while (performance.now() < stop && c.closeCode === null && c.ws.readyState === c.ws.OPEN) {
        // Hold our own send buffer under 4 MiB: once the server stops reading, we stop writing.
        if (c.ws.bufferedAmount < 4 * MiB)
          for (let i = 0; i < 50; i++) {
            const id = `f${sent}`;
            const open = encodeMessage({
              type: "env_open",
              id,
              tag: "SimpleSokoban",
              groups: 1,
              group_size: 1,
              seed: sent,
            });
            const close = encodeMessage({ type: "env_close", id });
            c.ws.send(open);
            c.ws.send(close);
            sent++;
            bytes += open.byteLength + close.byteLength;
          }
        maxClientBuffered = Math.max(maxClientBuffered, c.ws.bufferedAmount);
        await sleep(5);
      }
      ctx.notes.push(
        `${sent} open/close pairs (~${(bytes / 1024).toFixed(0)} kB) sent; client send buffer max ${(maxClientBuffered / MiB).toFixed(1)} MiB; closed by server: ${c.closeCode ?? "no"}`,
      );
      c.close();
    },
  },
];

interface Result {
  name: string;
  covers: string;
  up: boolean;
  worst_healthz_ms: number;
  healthz_failures: number;
  rss_growth_mib: number;
  rss_peak_growth_mib: number;
  good_client: string;
  check: string;
  bounds: string;
  notes: string;
}

async function runOne(attack: Attack): Promise<Result> {
  const gc = (globalThis as { gc?: () => void }).gc;
  const server = await buildServer({ logger: false, ...attack.options });
  const url = await server.listen(0, "127.0.0.1");
  // Warm up (first rollout, first healthz) so RSS growth is the attack's.
  await goodRollout(url, "warmup", 30_000);
  await fetch(`${url}/healthz`);
  gc?.();
  const rssBefore = process.memoryUsage().rss;
  let rssPeak = rssBefore;
  let worst = 0;
  let healthFailures = 0;
  let inFlight = 0;
  const poll = setInterval(() => {
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    if (inFlight >= 200) return;
    inFlight++;
    const start = performance.now();
    fetch(`${url}/healthz`, { signal: AbortSignal.timeout(10_000) })
      .then(async (res) => {
        await res.arrayBuffer();
        if (!res.ok) healthFailures++;
      })
      .catch(() => healthFailures++)
      .finally(() => {
        inFlight--;
        worst = Math.max(worst, performance.now() - start);
      });
  }, 50);

  const ctx: Ctx = { url, server, failures: [], notes: [] };
  const attackStart = performance.now();
  let attackEnd = Number.POSITIVE_INFINITY;
  let goodAt = Number.NaN;
  let goodError = "";
  const good = (async () => {
    await sleep(200);
    await goodRollout(url, "good", 45_000);
    goodAt = performance.now();
  })().catch((e: Error) => {
    goodError = e.message;
  });
  try {
    await Promise.race([
      attack.run(ctx),
      sleep(ATTACK_TIMEOUT_MS).then(() => {
        throw new Error(`attack did not finish in ${ATTACK_TIMEOUT_MS / 1000} s`);
      }),
    ]);
  } catch (e) {
    ctx.failures.push((e as Error).message);
  }
  attackEnd = performance.now();
  await good;
  await sleep(300);
  clearInterval(poll);
  let up = false;
  try {
    up = (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) })).ok;
  } catch {}
  gc?.();
  const rssAfter = process.memoryUsage().rss;
  rssPeak = Math.max(rssPeak, rssAfter);
  await Promise.race([server.shutdown("bench"), sleep(5000)]);
  const goodClient = goodError
    ? `no (${goodError})`
    : `yes, ${goodAt <= attackEnd ? "during" : "after"} (${Math.round(goodAt - attackStart - 200)} ms)`;
  return {
    name: attack.name,
    covers: attack.covers,
    up,
    worst_healthz_ms: Math.round(worst),
    healthz_failures: healthFailures,
    rss_growth_mib: Math.round((rssAfter - rssBefore) / MiB),
    rss_peak_growth_mib: Math.round((rssPeak - rssBefore) / MiB),
    good_client: goodClient,
    check: ctx.failures.length === 0 ? "ok" : `FAIL: ${ctx.failures.join("; ")}`,
    bounds: bounds(up, worst, rssAfter - rssBefore, !goodError),
    notes: ctx.notes.join("; "),
  };
}

/** #10's acceptance bounds: up, /healthz under 1 s, RSS growth under 300 MiB, other clients served. */
function bounds(up: boolean, worstMs: number, rssGrowth: number, good: boolean): string {
  const over: string[] = [];
  if (!up) over.push("down");
  if (worstMs >= 1000) over.push("/healthz ≥ 1 s");
  if (rssGrowth >= 300 * MiB) over.push("RSS ≥ 300 MiB");
  if (!good) over.push("good client failed");
  return over.length === 0 ? "within" : `over: ${over.join(", ")}`;
}

function runChild(attack: Attack): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--expose-gc", import.meta.filename, "--one", attack.name], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      const line = out.split("\n").find((l) => l.startsWith("RESULT "));
      if (line) return resolve(JSON.parse(line.slice(7)) as Result);
      resolve({
        name: attack.name,
        covers: attack.covers,
        up: false,
        worst_healthz_ms: Number.NaN,
        healthz_failures: Number.NaN,
        rss_growth_mib: Number.NaN,
        rss_peak_growth_mib: Number.NaN,
        good_client: "no",
        check: `FAIL: process ended (code ${code}, signal ${signal})`,
        bounds: "over: server died",
        notes: "",
      });
    });
  });
}

const { values } = parseArgs({
  options: { one: { type: "string" }, only: { type: "string" }, json: { type: "string" } },
});

if (values.one) {
  const attack = attacks.find((a) => a.name === values.one);
  if (!attack) throw new Error(`no attack ${values.one}`);
  const result = await runOne(attack);
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
  process.exit(0);
}

const selected = values.only ? attacks.filter((a) => values.only!.split(",").includes(a.name)) : attacks;
const results: Result[] = [];
const row = (cells: (string | number)[]) => `| ${cells.join(" | ")} |`;
console.log(
  row([
    "attack",
    "covers",
    "up",
    "worst /healthz ms",
    "RSS growth MiB (peak)",
    "good 2×2 rollout",
    "check",
    "#10 bounds",
    "notes",
  ]),
);
console.log(row(["---", "---", "---", "---:", "---:", "---", "---", "---", "---"]));
for (const attack of selected) {
  const r = await runChild(attack);
  results.push(r);
  console.log(
    row([
      r.name,
      r.covers,
      r.up ? "yes" : "no",
      `${r.worst_healthz_ms}${r.healthz_failures ? ` (${r.healthz_failures} failed)` : ""}`,
      `${r.rss_growth_mib} (${r.rss_peak_growth_mib})`,
      r.good_client,
      r.check,
      r.bounds,
      r.notes,
    ]),
  );
}
if (values.json)
  writeFileSync(values.json, `${JSON.stringify({ date: new Date().toISOString(), results }, null, 2)}\n`);
