// The hardening benchmark (issue #10): each numbered attack of the issue, plus the web page's
// uploads and watch subscriptions, against a fresh `rollgym serve` child process each, so a crash
// or a leak in one attack cannot hide another's and the RSS read from /proc is the server's
// alone. A bystander process (bench/attacks/prober.ts) polls /healthz every 50 ms and plays
// well-behaved 2 × 2 rollouts (stream and batch, credit and acks) the whole time.
// One line per attack: server up, worst /healthz latency, RSS growth (end and peak, VmHWM),
// the bystander's rollouts completed, and what the offending client observed.
// Usage: node bench/attacks.ts [--only NAME,NAME] [--json FILE] [--sockets N]
import { spawn } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { encodeMessage } from "../protocol/codec.ts";
import { servingUrl } from "../src/bench/children.ts";
import { helloFrame } from "../src/client/protocol-client.ts";
import { DEFAULT_CONNECTION_LIMITS } from "../src/server/connections.ts";
import { DEFAULT_LIMITS } from "../src/server/state.ts";
import {
  bound,
  episodes,
  frames,
  heldText,
  nonReaders,
  shareOfEpisodes,
  sockets,
  text,
  uploads,
  watchers,
} from "./attacks/bounds.ts";
import { type Client, connect, goodRollout, open, rawSocket, sleep } from "./attacks/client.ts";
import { type ProbeReport, probeReport } from "./attacks/probe-report.ts";
import { MiB, ROOT, type ServeChild, startProber, startServe } from "./attacks/server.ts";
import { EMPTY_FILE_LINES } from "./episode-lines.ts";

const ATTACK_TIMEOUT_MS = 90_000;
/** The directory symlink_swap_in_share shares (a fresh one per run). */
const SHARE_DIR = join(mkdtempSync(join(tmpdir(), "rollgym-attack-share-")), "share");
mkdirSync(SHARE_DIR);
const TOKEN = "bench-token";

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    json: { type: "string" },
    sockets: { type: "string" },
  },
});
/** Sockets per kind in the descriptor attack (#10.6): held open by this process, 3 kinds. */
const SOCKETS = Number(values.sockets ?? 4000);

interface Ctx {
  url: string;
  serve: ServeChild;
  token?: string;
  /** Expected outcomes that did not happen. */
  failures: string[];
  notes: string[];
  /** What the offending client observed (error codes, close codes, HTTP statuses). */
  observed: string[];
}

interface Attack {
  name: string;
  covers: string;
  serveArgs?: string[];
  /** Serve with a token (the bystander presents it). */
  token?: boolean;
  /** An engine the server must talk to: started before the server, its URL appended as --llm. */
  engine?: () => Promise<{ url: string; stop(): Promise<void> }>;
  /** RSS growth bound in MiB, derived from the limits (bench/attacks/bounds.ts, docs/server.md "Memory bounds, from the limits"). */
  rssBoundMiB: number;
  /** How long the attack may take, when not ATTACK_TIMEOUT_MS (rows that must fill 512 MiB). */
  timeoutMs?: number;
  /** The bystander is expected to be refused (a documented policy, e.g. four sessions at their share). */
  bystanderRefusedOk?: boolean;
  run(ctx: Ctx): Promise<void>;
}

function expect(ctx: Ctx, ok: boolean, what: string): void {
  if (!ok) ctx.failures.push(what);
}

/** Error codes (with counts) and the close code a client saw, e.g. "error limit ×3, close 4008". */
function observedBy(c: Client): string {
  const counts = new Map<string, number>();
  for (const e of c.of("error")) counts.set(String(e.code), (counts.get(String(e.code)) ?? 0) + 1);
  const parts = [...counts].map(([code, n]) => `error ${code}${n > 1 ? ` ×${n}` : ""}`);
  if (c.closeCode !== null) parts.push(`close ${c.closeCode}`);
  return parts.join(", ") || "nothing";
}

function welcomeLimits(c: Client): Record<string, number> {
  return (c.of("welcome")[0]?.limits ?? {}) as Record<string, number>;
}

const rollout = (
  id: string,
  groups: number,
  groupSize: number,
  delivery: "stream" | "batch",
  seed = 1,
  tag = "SimpleSokoban",
) => ({ type: "rollout", id, tags: [{ tag, groups }], mode: "train", group_size: groupSize, seed, delivery });

/** Acks every group as it arrives (and its batch frame), granting one credit back each time. */
function ackAll(c: Client): void {
  c.ws.on("message", () => {
    const f = c.received.at(-1)!;
    if (f.type === "group") {
      c.send({ type: "ack", rollout: f.rollout, groups: [f.group as number] });
      c.send({ type: "credit", groups: 1 });
    }
    if (f.type === "batch") c.send({ type: "ack", rollout: f.rollout, groups: [], batch: true });
  });
}

/**
 * A loopback source address for attacker socket `i`: the attackers come from 127.0.1.0/24 spread
 * over 64 addresses, the bystander from 127.0.0.1, as hosts on a network would.
 */
const attackerAddress = (i: number) => `127.0.1.${1 + (i % 64)}`;

/** An authenticated WebSocket that never says hello; resolves once open, records its close code. */
function silentWebSocket(
  url: string,
  token: string,
  localAddress: string,
): Promise<{ ws: WebSocket; code: () => number | null }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, {
      headers: { authorization: `Bearer ${token}` },
      localAddress,
    });
    let code: number | null = null;
    ws.on("close", (c) => {
      code = c;
    });
    ws.on("error", () => {});
    ws.once("open", () => resolve({ ws, code: () => code }));
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once("error", reject);
  });
}

/**
 * A raw HTTP request with exactly these headers (Host included, which fetch cannot set),
 * optionally the start of a body that never ends: the status, or "cut" / "timeout".
 */
function rawStatus(
  url: string,
  path: string,
  headers: Record<string, string>,
  partialBody?: Buffer,
): Promise<string> {
  const target = new URL(url);
  return new Promise((resolve) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path,
        method: partialBody ? "POST" : "GET",
        headers,
        setHost: !headers.host,
      },
      (res) => {
        res.resume();
        resolve(String(res.statusCode));
        req.destroy();
      },
    );
    req.setTimeout(30_000, () => {
      resolve("timeout");
      req.destroy();
    });
    req.on("error", () => resolve("cut"));
    if (partialBody) req.write(partialBody);
    else req.end();
  });
}

/** Opens `n` of something, `batch` at a time; counts the ones that failed to open. */
async function openMany<T>(
  n: number,
  batch: number,
  open: () => Promise<T>,
): Promise<{ ok: T[]; failed: number }> {
  const ok: T[] = [];
  let failed = 0;
  for (let i = 0; i < n; i += batch) {
    const results = await Promise.allSettled(Array.from({ length: Math.min(batch, n - i) }, open));
    for (const r of results)
      if (r.status === "fulfilled") ok.push(r.value);
      else failed++;
  }
  return { ok, failed };
}

/**
 * Opens an endless 16-episode FrozenLake session "s" on every client, then steps 900 kB texts
 * into it, round after round, until each one is refused or `ms` pass: how many steps were
 * accepted and each client's refusal message.
 */
async function fillEnvSessions(
  clients: Client[],
  ms: number,
): Promise<{ accepted: number; refusals: string[] }> {
  for (const [i, c] of clients.entries())
    c.send({
      type: "env_open",
      id: "s",
      tag: "FrozenLake",
      groups: 1,
      group_size: 16,
      seed: i,
      max_turn: 1000,
    });
  await Promise.all(clients.map((c) => c.next((f) => f.type === "env_opened", 60_000)));
  const text = "x".repeat(900_000); // no action: the episode goes on
  let accepted = 0;
  const refusals = new Map<number, string>();
  const stop = performance.now() + ms;
  for (let round = 0; refusals.size < clients.length && performance.now() < stop; round++)
    await Promise.all(
      clients.map(async (c, i) => {
        if (refusals.has(i)) return;
        const from = c.received.length;
        c.send({ type: "env_step", id: "s", responses: [{ env_id: round % 16, text }] });
        const r = await c.next(
          (f) => (f.type === "env_stepped" || f.type === "error") && c.received.indexOf(f) >= from,
          60_000,
        );
        if (r.type === "env_stepped") accepted++;
        else refusals.set(i, String(r.message));
      }),
    );
  return { accepted, refusals: [...refusals.values()] };
}

/** A `rollgym mock-engine` child; resolves once it listens. */
async function startMockEngine(args: string[]): Promise<{ url: string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ["src/cli/main.ts", "mock-engine", "--port", "0", ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "inherit"],
  });
  for await (const line of createInterface({ input: child.stdout! })) {
    const match = /listening on (http:\/\/\S+)/.exec(line);
    if (match) {
      child.stdout!.resume();
      return {
        url: match[1],
        stop: async () => {
          child.kill("SIGKILL");
          await new Promise((r) => child.once("exit", r));
        },
      };
    }
  }
  throw new Error("mock-engine exited before listening");
}

/** The processes whose command line mentions `needle` (to find a server a wrapper left behind). */
function processesMatching(needle: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      if (cmd.includes(needle)) pids.push(Number(entry));
    } catch {}
  }
  return pids;
}

/** A process's command line, shortened. */
function processName(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim().slice(0, 60);
  } catch {
    return String(pid);
  }
}

/**
 * Starts a server through a wrapper (`npm start`, `npx rollgym serve`), SIGTERMs the wrapper,
 * and reports whether the server still answers and whether any of its processes is left.
 */
async function signalThroughWrapper(command: string, args: string[]): Promise<string> {
  const marker = `rollgym.seed=${Math.floor(Math.random() * 1e9)}`; // names this server's processes
  const child = spawn(command, [...args, marker], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ROLLGYM_LOG_LEVEL: "error" },
  });
  child.stderr!.resume();
  const url = await servingUrl(child.stdout!);
  child.stdout!.resume();
  if (!url) return `${command}: did not start`;
  const start = performance.now();
  child.kill("SIGTERM");
  await new Promise((r) => child.once("exit", r));
  let stillServing = false;
  let left: number[] = [];
  for (let i = 0; i < 50; i++) {
    await sleep(100);
    left = processesMatching(marker);
    stillServing = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) }).then(
      (r) => r.ok,
      () => false,
    );
    if (!stillServing && left.length === 0) break;
  }
  const names = new Map(left.map((pid) => [pid, processName(pid)]));
  for (const pid of left) process.kill(pid, "SIGKILL");
  if (!stillServing && left.length === 0)
    return `${command} ${args[0]}: gone ${Math.round(performance.now() - start)} ms after SIGTERM`;
  const what = left.map((pid) => names.get(pid)).join(", ");
  return `${command} ${args[0]}: ${stillServing ? "still serving" : "not serving"} 5 s after SIGTERM, ${left.length} process(es) left (${what}; killed)`;
}

/** A credit every 5 s on each of `sockets` while it is open: no work (#28.4). Returns how to stop. */
function creditEvery5s(sockets: () => WebSocket[]): () => void {
  const credit = encodeMessage({ type: "credit", groups: 1 });
  const timer = setInterval(() => {
    for (const ws of sockets()) if (ws.readyState === WebSocket.OPEN) ws.send(credit);
  }, 5_000);
  return () => clearInterval(timer);
}

/**
 * Fills max_connections (1024) with sockets from 64 addresses that say hello and then nothing,
 * or (`keepAlive`) a credit every 5 s, which before #28.4 kept each one fresh for ever: a
 * newcomer at once, then past idle_drop_s.
 */
async function fillMaxConnections(ctx: Ctx, keepAlive: boolean): Promise<void> {
  let k = 0;
  const held = await openMany(1024, 100, async () => {
    const c = await silentWebSocket(ctx.url, "", attackerAddress(k++));
    c.ws.send(encodeMessage({ type: "hello", protocol: 1, client: keepAlive ? "keepalive" : "idle" }));
    return c;
  });
  const stop = keepAlive ? creditEvery5s(() => held.ok.map((c) => c.ws)) : () => {};
  const tryConnect = () =>
    connect(ctx.url, "newcomer").then(
      (c) => {
        c.close();
        return "welcomed";
      },
      (error: Error) => error.message,
    );
  try {
    const early = await tryConnect();
    await sleep(62_000); // past idle_drop_s (60 s)
    const late = await tryConnect();
    await sleep(500);
    const codes = new Map<number, number>();
    for (const c of held.ok) {
      const code = c.code();
      if (code !== null) codes.set(code, (codes.get(code) ?? 0) + 1);
    }
    ctx.observed.push(
      `sockets closed: ${[...codes].map(([code, n]) => `${n}× ${code}`).join(" ") || "none"} of ${held.ok.length}`,
    );
    ctx.notes.push(
      `${held.ok.length} hello'd sockets ${keepAlive ? "sending a credit every 5 s" : "idle"} (failed to open: ${held.failed}); a newcomer at once: ${early}; after 62 s: ${late}`,
    );
    expect(ctx, late === "welcomed", "a newcomer gets in once the sockets are past idle_drop_s");
  } finally {
    stop();
    for (const c of held.ok) c.ws.terminate();
  }
}

/**
 * max_watchers (32) watch subscriptions from 4 addresses (max_watchers_per_address 8 each) that
 * do nothing, or (`keepAlive`) send a credit every 5 s: a newcomer's watch at once, then past
 * watch_idle_s.
 */
async function holdMaxWatchers(ctx: Ctx, keepAlive: boolean): Promise<void> {
  const held = await Promise.all(
    Array.from({ length: 32 }, (_, i) =>
      open(ctx.url, helloFrame(`watcher${i}`), { localAddress: attackerAddress(i % 4) }),
    ),
  );
  for (const c of held) c.send({ type: "watch" });
  await Promise.all(held.map((c) => c.next((f) => f.type === "watching" || f.type === "error")));
  const stop = keepAlive ? creditEvery5s(() => held.map((c) => c.ws)) : () => {};
  const tryWatch = async () => {
    const c = await connect(ctx.url, "newcomer");
    c.send({ type: "watch" });
    const r = await c.next((f) => f.type === "watching" || f.type === "error");
    c.close();
    return r.type === "watching" ? "watching" : `error ${String(r.code)}`;
  };
  try {
    const early = await tryWatch();
    const idleS = welcomeLimits(held[0]).watch_idle_s ?? 60;
    await sleep(idleS * 1000 + 2_000);
    const late = await tryWatch();
    await sleep(200);
    const ended = held.filter((c) => c.of("error").some((e) => e.field === "watch_idle_s")).length;
    ctx.observed.push(`${keepAlive ? "credit-only" : "idle"} watchers ended: ${ended} of 32`);
    ctx.notes.push(`a newcomer's watch at once: ${early}; after ${idleS + 2} s: ${late}`);
    expect(ctx, early === "error limit", "a 33rd watch is refused while the 32 are fresh");
    expect(
      ctx,
      late === "watching" && ended === 1,
      "past watch_idle_s a newcomer takes an idle watch's place",
    );
  } finally {
    stop();
    for (const c of held) c.close();
  }
}

const attacks: Attack[] = [
  {
    name: "baseline_no_attack",
    covers: "noise floor",
    rssBoundMiB: bound(), // nothing held: the headroom alone
    async run(ctx) {
      // Only the bystander, for 15 s: what the machine's load alone does to the figures.
      await sleep(15_000);
      ctx.observed.push("-");
    },
  },
  {
    name: "env_open_huge_and_at_limits",
    covers: "#10.1",
    rssBoundMiB: bound(2 * shareOfEpisodes(), frames(2)), // two sessions at their share of episodes
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "env_open", id: "huge", tag: "SimpleSokoban", groups: 4096, group_size: 4096 });
      const huge = await c.next((f) => f.id === "huge" && (f.type === "error" || f.type === "env_opened"));
      expect(ctx, huge.type === "error" && huge.code === "limit", "4096 × 4096 refused with limit");
      // Then as large as the limits allow, again and again: each reply must come without
      // freezing the server, and the budget must stop the client somewhere.
      const perConnection = welcomeLimits(c).max_episodes_per_connection ?? 65_536;
      const groupSize = 16;
      const groups = Math.min(4096, Math.floor(perConnection / groupSize));
      let opened = 0;
      let refusal = "";
      const times: number[] = [];
      for (let i = 0; i < 20 && !refusal; i++) {
        const t = performance.now();
        c.send({
          type: "env_open",
          id: `s${i}`,
          tag: "SimpleSokoban",
          groups,
          group_size: groupSize,
          seed: i,
        });
        const r = await c.next(
          (f) => f.id === `s${i}` && (f.type === "error" || f.type === "env_opened"),
          60_000,
        );
        times.push(performance.now() - t);
        if (r.type === "env_opened") opened++;
        else refusal = `${r.code}: ${String(r.message).slice(0, 80)}`;
      }
      // One more connection takes its share too (four at their share would exhaust the global
      // budget, the documented policy that four_hogs_at_their_share measures).
      const others = await Promise.all([1].map((i) => connect(ctx.url, `opener${i}`)));
      for (const [i, o] of others.entries())
        o.send({
          type: "env_open",
          id: "x",
          tag: "SimpleSokoban",
          groups,
          group_size: groupSize,
          seed: 100 + i,
        });
      const answers = await Promise.all(
        others.map((o) =>
          o.next((f) => f.id === "x" && (f.type === "error" || f.type === "env_opened"), 60_000),
        ),
      );
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `${groups} × ${groupSize} sessions opened by one connection before refusal: ${opened} (then ${refusal || "none"}); open reply ${Math.round(Math.min(...times))}–${Math.round(Math.max(...times))} ms; another connection: ${answers.map((a) => (a.type === "error" ? a.code : "opened")).join(",")}`,
      );
      expect(ctx, refusal.startsWith("limit"), "the per-connection budget stops env_open with limit");
      c.close();
      for (const o of others) o.close();
    },
  },
  {
    name: "env_step_1MB_parser",
    covers: "#10.2",
    rssBoundMiB: bound(frames(1), text(4 * MiB)), // four 1 MB responses held
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "env_open", id: "s", tag: "SimpleSokoban", groups: 4, group_size: 1, seed: 1 });
      const opened = await c.next((f) => f.id === "s" && (f.type === "env_opened" || f.type === "error"));
      const envIds = (opened.episodes as { env_id: number }[]).map((e) => e.env_id);
      // Under the 1 MiB frame limit with the envelope: four shapes that backtracked or might.
      const texts = [
        "</think><think>".repeat(66_000),
        "<think>".repeat(140_000),
        `${"<answer>".repeat(60_000)}${"</answer>".repeat(50_000)}`,
        `${"</think>".repeat(60_000)}<answer>${" Up ||".repeat(20_000)}`,
      ];
      const times: number[] = [];
      for (const [i, text] of texts.entries()) {
        const start = performance.now();
        c.send({ type: "env_step", id: "s", responses: [{ env_id: envIds[i], text }] });
        const reply = await c.next(
          (f) =>
            f.id === "s" && (f.type === "env_stepped" || f.type === "error") && c.received.indexOf(f) > 1 + i,
          60_000,
        );
        times.push(Math.round(performance.now() - start));
        expect(ctx, reply.type === "env_stepped", `step ${i} answered with env_stepped`);
      }
      ctx.observed.push(observedBy(c));
      ctx.notes.push(`4 × ~1 MB responses parsed and answered in ${times.join(", ")} ms`);
      c.close();
    },
  },
  {
    name: "unacked_groups_across_rollouts",
    covers: "#10.3",
    rssBoundMiB: bound(shareOfEpisodes(), frames(1)), // one session's share held as groups
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "credit", groups: 1_000_000 });
      // 16k-episode batch rollouts one after another; the client reads every group, confirms
      // each batch frame (so the rollouts are finished) but never acknowledges a group.
      const perConnection = welcomeLimits(c).max_episodes_per_connection ?? 65_536;
      const groups = Math.min(4096, Math.floor(perConnection / 4));
      let completed = 0;
      let refusal = "";
      const stop = performance.now() + 40_000;
      for (let i = 0; performance.now() < stop && !refusal && i < 8; i++) {
        c.send(rollout(`u${i}`, groups, 4, "batch", 1000 * i));
        const end = await c.next(
          (f) => f.rollout === `u${i}` && (f.type === "batch" || f.type === "error"),
          60_000,
        );
        if (end.type === "error") refusal = `${end.code}: ${String(end.message).slice(0, 90)}`;
        else {
          completed++;
          c.send({ type: "ack", rollout: `u${i}`, groups: [], batch: true });
        }
      }
      const unacked = c.of("group").length;
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `${completed} rollouts of ${groups} × 4 completed, ${unacked} groups held unacknowledged, then ${refusal || "no refusal"}`,
      );
      expect(
        ctx,
        refusal.startsWith("limit"),
        "a new rollout is refused with limit once the unacked budget is held",
      );
      c.close();
    },
  },
  {
    name: "no_read_env_open_close_flood",
    covers: "#10.4",
    rssBoundMiB: bound(nonReaders(1), shareOfEpisodes(), frames(1)), // a non-reader's send buffer and its session's share
    async run(ctx) {
      const c = await connect(ctx.url, "flooder");
      const limits = welcomeLimits(c);
      c.pauseReading();
      let sent = 0;
      let maxClientBuffered = 0;
      // Long enough to see the server's answer: it stops reading at send_pause_bytes and closes
      // the client (4008) after send_stall_s (60 s by default; `serve` has no flag for it).
      const seconds = Math.min(75, Math.max(15, (limits.send_stall_s ?? 0) + 10));
      const stop = performance.now() + seconds * 1000;
      while (performance.now() < stop && c.closeCode === null && c.ws.readyState === c.ws.OPEN) {
        // Hold our own send buffer under 4 MiB: once the server stops reading, we stop writing.
        if (c.ws.bufferedAmount < 4 * MiB)
          for (let i = 0; i < 50; i++) {
            const id = `f${sent}`;
            c.ws.send(
              encodeMessage({
                type: "env_open",
                id,
                tag: "SimpleSokoban",
                groups: 1,
                group_size: 1,
                seed: sent,
              }),
            );
            c.ws.send(encodeMessage({ type: "env_close", id }));
            sent++;
          }
        maxClientBuffered = Math.max(maxClientBuffered, c.ws.bufferedAmount);
        await sleep(5);
      }
      // The server's close frame sits behind the replies we never read: read them now.
      c.resumeReading();
      await Promise.race([c.closed(), sleep(5000)]);
      ctx.observed.push(c.closeCode === null ? "not closed" : `close ${c.closeCode} (${c.closeReason})`);
      ctx.notes.push(
        `${sent} open/close pairs sent in ${seconds} s; the client's own send buffer reached ${(maxClientBuffered / MiB).toFixed(1)} MiB (the server stopped reading: ${maxClientBuffered >= 4 * MiB ? "yes" : "no"}); send_pause_bytes ${limits.send_pause_bytes ?? "?"}, max_send_buffer_bytes ${limits.max_send_buffer_bytes ?? "?"}, send_stall_s ${limits.send_stall_s ?? "?"}`,
      );
      expect(ctx, maxClientBuffered >= 4 * MiB, "the server stopped reading");
      expect(ctx, c.closeCode === 4008, "the client was closed with 4008");
      c.ws.terminate();
    },
  },
  {
    name: "one_hog_paused_stream",
    covers: "#10.5",
    rssBoundMiB: bound(shareOfEpisodes(), frames(1)), // one session at its share
    async run(ctx) {
      // No credit: the rollout fills its buffer and pauses, holding its reservation.
      const hog = await connect(ctx.url, "hog");
      hog.send(rollout("hog", 4096, 16, "stream"));
      const perConnection = welcomeLimits(hog).max_episodes_per_connection ?? 65_536;
      await sleep(300);
      if (hog.of("error").length > 0) hog.send(rollout("hog2", Math.floor(perConnection / 16), 16, "stream"));
      await sleep(15_000);
      ctx.observed.push(observedBy(hog));
      ctx.notes.push(
        `the hog asked for 4096 × 16, then its share (${perConnection}) if refused; the bystander ran throughout`,
      );
      hog.close();
    },
  },
  {
    name: "four_hogs_at_their_share",
    covers: "#10.5 (policy)",
    rssBoundMiB: bound(4 * shareOfEpisodes(), frames(4)), // four sessions at their share: max_episodes_in_flight
    bystanderRefusedOk: true,
    async run(ctx) {
      const hogs = await Promise.all([0, 1, 2, 3].map((i) => connect(ctx.url, `hog${i}`)));
      const perConnection = welcomeLimits(hogs[0]).max_episodes_per_connection ?? 16_384;
      for (const [i, h] of hogs.entries())
        h.send(rollout("hog", Math.min(4096, Math.floor(perConnection / 16)), 16, "stream", i));
      await sleep(12_000);
      for (const h of hogs) h.close();
      ctx.observed.push(hogs.map(observedBy).join(" / "));
      // After the hogs leave, their sessions keep their budget for resume_grace_s (documented).
      ctx.notes.push(
        "four sessions each ask for their full share as a paused stream (docs/server.md 'Fair share': a stream counts the groups it has started, so the global budget keeps room; refusals of the bystander here would be that documented policy)",
      );
    },
  },
  {
    name: "silent_and_half_open_sockets",
    covers: "#10.6",
    rssBoundMiB: bound(
      sockets(DEFAULT_CONNECTION_LIMITS.maxConnections + DEFAULT_CONNECTION_LIMITS.maxPendingConnections),
    ), // every WebSocket and pending place taken
    token: true,
    async run(ctx) {
      const n = SOCKETS;
      // Half-sent upgrade requests (no token yet), bare TCP connections that say nothing, and
      // authenticated WebSockets that never send hello.
      let k = 0;
      const half = await openMany(n, 200, async () => {
        const s = await rawSocket(ctx.url, attackerAddress(k++));
        s.on("error", () => {});
        s.write("GET /v1/rollouts HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n");
        return s;
      });
      const bare = await openMany(n, 200, async () => {
        const s = await rawSocket(ctx.url, attackerAddress(k++));
        s.on("error", () => {});
        return s;
      });
      const refusals = new Map<string, number>();
      const silent = await openMany(n, 100, () =>
        silentWebSocket(ctx.url, TOKEN, attackerAddress(k++)).catch((error: Error) => {
          refusals.set(error.message, (refusals.get(error.message) ?? 0) + 1);
          throw error;
        }),
      );
      const opened = performance.now();
      // A real token holder must still get in while they are held.
      let realClient = "no";
      try {
        const real = await connect(ctx.url, "real", TOKEN);
        realClient = real.of("welcome").length ? "welcomed" : observedBy(real);
        real.close();
      } catch (error) {
        realClient = `refused (${(error as Error).message})`;
      }
      await sleep(15_000);
      const closedHalf = half.ok.filter((s) => s.destroyed || s.readableEnded).length;
      const closedBare = bare.ok.filter((s) => s.destroyed || s.readableEnded).length;
      const codes = new Map<number, number>();
      for (const c of silent.ok) {
        const code = c.code();
        if (code !== null) codes.set(code, (codes.get(code) ?? 0) + 1);
      }
      ctx.observed.push(
        `half-open closed ${closedHalf}/${half.ok.length}, bare closed ${closedBare}/${bare.ok.length}, no-hello closed ${[...codes].map(([k, v]) => `${v}× ${k}`).join(" ") || "0"}/${silent.ok.length}`,
      );
      ctx.notes.push(
        `${n} of each kind asked from 64 addresses (failed to open: ${half.failed}, ${bare.failed}, ${silent.failed}${refusals.size ? ` [${[...refusals].map(([m, v]) => `${v}× ${m}`).join(", ")}]` : ""}); real token holder from 127.0.0.1: ${realClient}; held ${Math.round((performance.now() - opened) / 1000)} s; ulimit -n 20000`,
      );
      expect(ctx, realClient === "welcomed", "a real token holder gets in");
      for (const s of [...half.ok, ...bare.ok]) s.destroy();
      for (const c of silent.ok) c.ws.terminate();
    },
  },
  {
    name: "env_hosting_sessions_and_growing_chat",
    covers: "#10.7",
    rssBoundMiB: bound(shareOfEpisodes(), text(DEFAULT_LIMITS.maxHeldBytesPerConnection), frames(1)), // one session at its share of episodes and of bytes
    async run(ctx) {
      const c = await connect(ctx.url);
      const limits = welcomeLimits(c);
      // Many small sessions on one connection.
      let sessions = 0;
      let refusal = "";
      for (let i = 0; i < 1000 && !refusal; i++) {
        c.send({ type: "env_open", id: `m${i}`, tag: "SimpleSokoban", groups: 1, group_size: 1, seed: i });
        const r = await c.next((f) => f.id === `m${i}` && (f.type === "env_opened" || f.type === "error"));
        if (r.type === "env_opened") sessions++;
        else refusal = String(r.code);
      }
      for (let i = 0; i < sessions; i++) c.send({ type: "env_close", id: `m${i}` });
      await c.next((f) => f.type === "env_closed" && f.id === `m${sessions - 1}`);
      // One episode, 40 turns of ~900 kB responses with no action (the episode goes on).
      c.send({
        type: "env_open",
        id: "chat",
        tag: "SimpleSokoban",
        groups: 1,
        group_size: 1,
        seed: 5,
        max_turn: 100,
      });
      const opened = await c.next((f) => f.id === "chat" && (f.type === "env_opened" || f.type === "error"));
      let turns = 0;
      let largest = 0;
      let stepRefusal = "";
      if (opened.type === "env_opened") {
        const envId = (opened.episodes as { env_id: number }[])[0].env_id;
        const text = "x".repeat(900_000);
        for (let t = 0; t < 40 && !stepRefusal; t++) {
          const before = c.raw.length;
          c.send({ type: "env_step", id: "chat", responses: [{ env_id: envId, text }] });
          const r = await c.next(
            (f) =>
              f.id === "chat" &&
              (f.type === "env_stepped" || f.type === "error") &&
              c.received.indexOf(f) >= before,
            60_000,
          );
          largest = Math.max(largest, c.raw[c.received.indexOf(r)].byteLength);
          if (r.type === "error") stepRefusal = String(r.code);
          else turns++;
        }
      }
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `env sessions opened on one connection: ${sessions} (then ${refusal || "none"}; max_env_sessions_per_connection ${limits.max_env_sessions_per_connection ?? "?"}); 900 kB turns accepted: ${turns} (then ${stepRefusal || "none"}; max_held_bytes_per_connection ${limits.max_held_bytes_per_connection ?? "?"}); largest env_stepped ${(largest / MiB).toFixed(1)} MiB`,
      );
      expect(ctx, refusal === "limit", "env sessions per connection bounded");
      expect(ctx, stepRefusal === "limit" || largest < 8 * MiB, "the growing chat is bounded");
      c.close();
    },
  },
  {
    name: "signals_and_shutdown_deadline",
    covers: "#10.8",
    rssBoundMiB: bound(nonReaders(1), shareOfEpisodes(), frames(1)), // a non-reader's send buffer and its session's share
    async run(ctx) {
      ctx.notes.push(await signalThroughWrapper("npm", ["start", "--", "--port", "0"]));
      ctx.notes.push(await signalThroughWrapper("npx", ["rollgym", "serve", "--port", "0"]));
      // A client that does not read, with a long stream rollout: SIGTERM must keep the deadline.
      const deadline = 2;
      const s = await startServe(["--shutdown-deadline", String(deadline)]);
      const reader = await connect(s.url, "reader");
      const sleeper = await connect(s.url, "sleeper");
      sleeper.send({ type: "credit", groups: 1_000_000 });
      sleeper.send(rollout("long", 1024, 16, "stream"));
      reader.send({ type: "credit", groups: 1_000_000 });
      reader.send(rollout("r", 1024, 16, "batch"));
      await sleep(1000);
      sleeper.pauseReading();
      await sleep(2000);
      const start = performance.now();
      s.child.kill("SIGTERM");
      await sleep(300);
      s.child.kill("SIGTERM"); // a second signal: batch frames must still be sent
      const exit = await s.stop(30_000, false);
      const took = (performance.now() - start) / 1000;
      await sleep(200);
      const readerBatch = reader.of("batch").some((f) => f.rollout === "r");
      ctx.notes.push(
        `--shutdown-deadline ${deadline}, a non-reading client, two SIGTERMs 300 ms apart: exited in ${took.toFixed(1)} s (${exit.signal ?? `code ${exit.code}`}); the reading client got its batch frame: ${readerBatch ? "yes" : "no"}, closing: ${reader.of("closing").length ? "yes" : "no"}, close ${reader.closeCode}`,
      );
      ctx.observed.push(`non-reader close ${sleeper.closeCode ?? "none"}`);
      expect(ctx, took <= deadline + 3, `server exits within the deadline (+3 s) with a non-reading client`);
      expect(ctx, readerBatch, "batch frame sent despite a second signal");
      expect(
        ctx,
        ctx.notes.slice(0, 2).every((n) => n.includes("gone")),
        "npm start and npx rollgym serve pass SIGTERM to the server",
      );
    },
  },
  {
    name: "builtin_policy_big_batch_and_200_clients",
    covers: "#10.9",
    // Legitimate work, not an attack on memory: about 42,000 episodes held at once, bounded by
    // the documented 16 KiB per held episode at the peak (docs/server.md "Memory behind a slow
    // client": serve's full GCs let the heap reach 3x what survived, then give it back).
    rssBoundMiB: bound(episodes(16_384 + 200 * 128), sockets(200)),
    async run(ctx) {
      const big = await connect(ctx.url, "big");
      big.send({ type: "credit", groups: 1_000_000 });
      const perConnection = welcomeLimits(big).max_episodes_per_connection ?? 65_536;
      const groups = Math.min(4096, Math.floor(perConnection / 16));
      big.send(rollout("big", groups, 16, "batch"));
      await sleep(6000);
      // 200 clients, each a 16 × 8 stream rollout, while the big batch runs.
      const clients = await Promise.all(Array.from({ length: 200 }, (_, i) => connect(ctx.url, `c${i}`)));
      for (const [i, c] of clients.entries()) {
        ackAll(c);
        c.send({ type: "credit", groups: 4 });
        c.send(rollout("r", 16, 8, "stream", i));
      }
      const ends = await Promise.all(
        clients.map((c) =>
          c
            .next((f) => f.rollout === "r" && (f.type === "batch" || f.type === "error"), 80_000)
            .catch(() => null),
        ),
      );
      const done = ends.filter((e) => e?.type === "batch").length;
      big.send({ type: "cancel", rollout: "big" });
      const bigEnd = await big.next(
        (f) => f.rollout === "big" && (f.type === "batch" || f.type === "error"),
        30_000,
      );
      ctx.observed.push(
        `big: ${bigEnd.type}${bigEnd.code ? ` ${bigEnd.code}` : ""}; 200 clients: ${done} batches`,
      );
      ctx.notes.push(
        `a ${groups} × 16 oracle batch (cancelled at the end) and 200 clients' 16 × 8 stream rollouts: ${done}/200 completed`,
      );
      expect(ctx, done === 200, "every one of the 200 clients' rollouts completed");
      for (const c of clients) c.close();
      big.close();
    },
  },
  {
    name: "seed_past_2^32",
    covers: "#10.10 (seeds)",
    rssBoundMiB: bound(frames(1)), // one client's frames
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "credit", groups: 100 });
      c.send(rollout("big", 8, 2, "batch", 4294967295));
      const r = await c.next((f) => f.rollout === "big" && (f.type === "error" || f.type === "batch"));
      c.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 2, group_size: 1, seed: 4294967295 });
      const e = await c.next((f) => f.id === "e" && (f.type === "error" || f.type === "env_opened"));
      await sleep(500);
      ctx.observed.push(observedBy(c));
      expect(ctx, r.code === "bad_frame" && r.field === "seed", "rollout refused with bad_frame on seed");
      expect(ctx, e.code === "bad_frame" && e.field === "seed", "env_open refused with bad_frame on seed");
      expect(ctx, c.of("group").length === 0, "no group frames after the error");
      // And the WebSocket layer's own refusal: a text frame with invalid UTF-8 (1007).
      const t = await connect(ctx.url, "utf8");
      t.ws.send(Buffer.from([0xc3, 0x28, 0xff]), { binary: false });
      await Promise.race([t.closed(), sleep(3000)]);
      ctx.observed.push(`invalid UTF-8 text frame: close ${t.closeCode}`);
      expect(
        ctx,
        t.closeCode === 1007 || t.closeCode === 1002,
        "invalid UTF-8 text frame closes with 1007 (or 1002)",
      );
      c.close();
    },
  },
  {
    name: "rollout_id_reuse_while_queued",
    covers: "#10.10 (id reuse)",
    rssBoundMiB: bound(shareOfEpisodes(), frames(1)), // one session at its share
    async run(ctx) {
      const c = await connect(ctx.url);
      // No credit: the first rollout's groups and batch frame stay queued.
      c.send(rollout("r", 8, 2, "batch", 1, "Bandit"));
      await sleep(1500);
      c.send({ type: "ack", rollout: "r", groups: [], batch: true }); // a blind confirm
      c.send(rollout("r", 8, 2, "batch", 2, "Bandit"));
      await sleep(1500);
      c.send({ type: "credit", groups: 100 });
      // Ack what arrives; wait until things settle.
      ackAll(c);
      await sleep(2000);
      const groups = c.of("group");
      const keys = groups.map((g) => `${g.seq}`);
      const dupSeq = keys.length - new Set(keys).size;
      const internal = c.of("error").filter((e) => e.code === "internal").length;
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `${groups.length} group frames, ${c.of("batch").length} batch frames, duplicate seqs ${dupSeq}; errors: ${
          c
            .of("error")
            .map((e) => e.code)
            .join(",") || "none"
        }`,
      );
      expect(ctx, internal === 0, "no internal error");
      expect(ctx, dupSeq === 0, "no seq delivered twice");
      expect(
        ctx,
        c.of("error").some((e) => e.code === "duplicate_id") || c.of("batch").length === 2,
        "the reuse is refused with duplicate_id, or both rollouts deliver",
      );
      c.close();
    },
  },
  {
    name: "cancel_paused_stream",
    covers: "#10.10 (cancel)",
    rssBoundMiB: bound(shareOfEpisodes(), frames(1)), // one session at its share
    async run(ctx) {
      const c = await connect(ctx.url);
      const perConnection = welcomeLimits(c).max_episodes_per_connection ?? 65_536;
      const groups = Math.min(4096, Math.floor(perConnection / 16));
      c.send(rollout("p", groups, 16, "stream"));
      await sleep(4000); // the buffer fills; the rollout pauses
      const rssBefore = ctx.serve.rss();
      const start = performance.now();
      c.send({ type: "cancel", rollout: "p" });
      c.send({ type: "credit", groups: 1_000_000 });
      const end = await c.next(
        (f) => f.rollout === "p" && (f.type === "batch" || f.type === "error"),
        60_000,
      );
      const took = performance.now() - start;
      await sleep(500);
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `${groups} × 16 paused stream cancelled: ${end.type} after ${Math.round(took)} ms, ${c.of("group").length} groups delivered, failed ${end.failed}, RSS change ${((ctx.serve.rss() - rssBefore) / MiB).toFixed(0)} MiB`,
      );
      expect(ctx, end.type === "batch", "cancel ends the rollout with its batch frame");
      expect(ctx, c.of("group").length <= 200, "cancel does not materialise the remaining groups");
      c.close();
    },
  },
  {
    name: "hung_inference_request",
    covers: "#10.10 (hung engine)",
    rssBoundMiB: bound(shareOfEpisodes(), frames(1)), // one session at its share
    // 30% of requests never answer (an hour's delay); requests time out after 2 s.
    engine: () => startMockEngine(["--slow-rate", "0.3", "--slow-ms", "3600000"]),
    serveArgs: ["--model", "mock/qwen-toy", "rollgym.llm.timeout_s=2", "rollgym.llm.retry_budget_s=20"],
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "credit", groups: 100 });
      const start = performance.now();
      c.send({ ...rollout("h", 4, 2, "batch"), max_turn: 2 });
      const end = await c.next(
        (f) => f.rollout === "h" && (f.type === "batch" || f.type === "error"),
        80_000,
      );
      const took = performance.now() - start;
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `engine hangs 30% of requests, timeout_s 2: a 4 × 2 rollout (2 turns) ended ${end.type} in ${(took / 1000).toFixed(1)} s, failed ${end.failed ?? "?"}`,
      );
      expect(ctx, end.type === "batch", "the rollout ends despite hung requests");
      c.close();
      // The bystander plays against the same engine: give it time to finish rollouts too.
      await sleep(15_000);
    },
  },
  {
    name: "uploads_at_and_over_limits",
    covers: "#9 uploads",
    rssBoundMiB: bound(uploads(), sockets(16)), // uploads kept, received and checked
    async run(ctx) {
      const limits = { maxUploadBytes: 32 * MiB, maxUploads: 16 }; // docs/server.md defaults
      const { header, summary } = EMPTY_FILE_LINES;
      // A sound file of the wanted size: the padding sits in the header's settings (a group line
      // must be a whole group since the one reader checks every field).
      const file = (padding: string) =>
        `${header.replace('"settings":{}', `"settings":{"padding":${JSON.stringify(padding)}}`)}\n${summary}\n`;
      const base = Buffer.byteLength(file(""));
      const atLimit = file("x".repeat(limits.maxUploadBytes - base));
      const overLimit = file("x".repeat(limits.maxUploadBytes - base + 1));
      const failures = new Map<string, number>();
      const upload = async (body: string) => {
        const res = await fetch(`${ctx.url}/v1/episode-files`, {
          method: "POST",
          headers: { "content-type": "application/x-ndjson" },
          body,
        }).catch((error: Error & { cause?: { code?: string; message?: string } }) => {
          const why = `${error.message} (${error.cause?.code ?? error.cause?.message ?? "?"})`;
          failures.set(why, (failures.get(why) ?? 0) + 1);
          return null;
        });
        if (res === null) return { status: 0, id: undefined };
        if (!res.ok) {
          await res.arrayBuffer();
          return { status: res.status, id: undefined };
        }
        return { status: res.status, id: ((await res.json()) as { id: string }).id };
      };
      const kept = async (id: string | undefined) =>
        id !== undefined && (await fetch(`${ctx.url}/v1/episode-files/uploads/${id}`)).status === 200;
      const small: string[] = [];
      for (let i = 0; i < 40; i++) {
        const r = await upload(file(String(i)));
        if (r.status === 200 && r.id) small.push(r.id);
      }
      let keptSmall = 0;
      for (const id of small) if (await kept(id)) keptSmall++;
      expect(ctx, keptSmall === limits.maxUploads, `16 of 40 small uploads kept (got ${keptSmall})`);
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
      ctx.observed.push(`over-size: HTTP ${[...new Set(over)].join(",")}`);
      if (failures.size)
        ctx.observed.push(`requests failed: ${[...failures].map(([m, n]) => `${n}× ${m}`).join(", ")}`);
      ctx.notes.push(
        `40 small: ${keptSmall} kept; 12 × 32 MiB: ${bigOk} accepted, ${keptBig} kept; the server keeps up to 64 MiB of uploads (docs/server.md)`,
      );
      expect(ctx, bigOk === 12 && keptBig === 2, "12 uploads at the size limit accepted, 2 kept (64 MiB)");
      expect(
        ctx,
        over.every((s) => s === 413 || s === 0),
        "over-size uploads refused (413, or the connection cut while sending)",
      );
    },
  },
  {
    name: "watchers_max+1_and_idle",
    covers: "#9 watch",
    rssBoundMiB: bound(watchers(), sockets(34), shareOfEpisodes()), // every watcher's buffer, and the trainer's session
    async run(ctx) {
      const clients = await Promise.all(Array.from({ length: 33 }, () => connect(ctx.url, "watcher")));
      for (const c of clients) c.send({ type: "watch" });
      await Promise.all(clients.map((c) => c.next((f) => f.type === "watching" || f.type === "error")));
      const refused = clients.filter((c) => c.of("error").some((e) => e.code === "limit")).length;
      expect(ctx, refused === 1, `1 of 33 watchers refused with limit (got ${refused})`);
      for (const c of clients) c.close();
      await sleep(500);
      // A watcher that never reads, while a trainer runs ten 64-group stream rollouts.
      const idle = await connect(ctx.url, "idle-watcher");
      idle.send({ type: "watch" });
      await idle.next((f) => f.type === "watching");
      idle.pauseReading();
      const trainer = await connect(ctx.url, "trainer");
      ackAll(trainer);
      trainer.send({ type: "credit", groups: 100_000 });
      let complete = 0;
      for (let i = 0; i < 10; i++) {
        const id = `t${i}`;
        trainer.send(rollout(id, 64, 8, "stream", 4242 + i, "CoordSokoban"));
        const end = await trainer.next((f) => f.rollout === id && (f.type === "batch" || f.type === "error"));
        if (end.type === "batch" && trainer.of("group").filter((f) => f.rollout === id).length === 64)
          complete++;
      }
      ctx.observed.push(
        `33rd watcher: error limit ×${refused}; idle watcher: ${idle.closeCode === null ? "open" : `close ${idle.closeCode}`}`,
      );
      ctx.notes.push(
        `trainer completed ${complete}/10 rollouts of 64 groups beside a watcher that never reads`,
      );
      expect(ctx, complete === 10, "trainer got all 64 groups of each rollout");
      trainer.close();
      idle.ws.terminate();
    },
  },
  {
    name: "env_bytes_across_connections",
    covers: "#19.1",
    // max_held_bytes (512 MiB) of text at 1.1 × in RSS (docs/server.md "Memory bounds, from the limits").
    rssBoundMiB: bound(heldText(), frames(16)),
    // 512 MiB of 900 kB steps: about a minute on an idle machine, several under load.
    timeoutMs: 300_000,
    async run(ctx) {
      // 16 connections, each with room for 128 MiB: together four times the server-wide budget.
      const clients = await Promise.all(Array.from({ length: 16 }, (_, i) => connect(ctx.url, `filler${i}`)));
      const maxHeldBytes = welcomeLimits(clients[0]).max_held_bytes;
      const { accepted, refusals: messages } = await fillEnvSessions(clients, 280_000);
      const refusals = new Map<string, number>();
      for (const message of messages) {
        const limit = /^(\w+) is/.exec(message)?.[1] ?? message.slice(0, 40);
        refusals.set(limit, (refusals.get(limit) ?? 0) + 1);
      }
      ctx.observed.push(observedBy(clients[0]));
      ctx.notes.push(
        `16 connections stepping 900 kB texts: ${accepted} steps accepted (${((accepted * 900_000) / MiB).toFixed(0)} MiB of text; max_held_bytes ${maxHeldBytes === undefined ? "?" : (maxHeldBytes / MiB).toFixed(0)} MiB), then refused: ${[...refusals].map(([k, v]) => `${v}× ${k}`).join(", ")}`,
      );
      expect(ctx, messages.length === clients.length, "every connection is refused in the end");
      expect(ctx, (refusals.get("max_held_bytes") ?? 0) > 0, "the server-wide max_held_bytes refuses");
      for (const c of clients) c.close();
    },
  },
  {
    name: "memory_budget_mixed_sessions",
    covers: "#19.1 (one budget)",
    // The memory budget's RSS line (docs/server.md "Memory bounds, from the limits").
    rssBoundMiB: bound(Math.max(heldText(), episodes(DEFAULT_LIMITS.maxEpisodesInFlight)), frames(10)),
    timeoutMs: 300_000,
    async run(ctx) {
      // Two sessions hold 4,096 episodes each as unacknowledged groups (read, never
      // acknowledged), then eight connections fill env sessions with 900 kB turns: everything
      // counts against one max_held_bytes, which refuses in the end.
      const holders = await Promise.all([0, 1].map((i) => connect(ctx.url, `holder${i}`)));
      for (const [i, h] of holders.entries()) {
        h.send({ type: "credit", groups: 100_000 });
        h.send(rollout(`held${i}`, 256, 16, "batch", 100 + i * 256));
      }
      await Promise.all(holders.map((h) => h.next((f) => f.type === "batch" || f.type === "error", 80_000)));
      const fillers = await Promise.all(Array.from({ length: 8 }, (_, i) => connect(ctx.url, `filler${i}`)));
      const { accepted, refusals } = await fillEnvSessions(fillers, 260_000);
      const lastRefusal = refusals.at(-1) ?? "";
      const unacked = holders.map((h) => h.of("group").length);
      ctx.observed.push(`${refusals.length} fillers refused: ${lastRefusal.slice(0, 220)}`);
      ctx.notes.push(
        `groups held unacknowledged: ${unacked.join(" + ")}; 900 kB env steps accepted: ${accepted} (${((accepted * 900_000) / MiB).toFixed(0)} MiB of text)`,
      );
      expect(ctx, /^max_held_bytes is/.test(lastRefusal), "the server-wide max_held_bytes refuses");
      expect(ctx, /groups held for acknowledgement [1-9]/.test(lastRefusal), "held groups are charged");
      for (const c of [...holders, ...fillers]) c.close();
    },
  },
  {
    name: "env_empty_steps_16k_episodes",
    covers: "#19.1 (empty steps, big steps)",
    rssBoundMiB: bound(shareOfEpisodes(), text(DEFAULT_LIMITS.maxHeldBytesPerConnection), frames(1)), // one session at its share of episodes and of bytes
    async run(ctx) {
      const c = await connect(ctx.url);
      c.send({ type: "env_open", id: "e", tag: "FrozenLake", groups: 1024, group_size: 16, max_turn: 1000 });
      const opened = await c.next(
        (f) => f.id === "e" && (f.type === "env_opened" || f.type === "error"),
        60_000,
      );
      expect(ctx, opened.type === "env_opened", `16,384 episodes opened (${String(opened.message ?? "")})`);
      const ids = ((opened.episodes ?? []) as { env_id: number }[]).map((e) => e.env_id);
      const times: number[] = [];
      let refusal = "";
      for (let i = 0; i < 20 && !refusal && ids.length; i++) {
        const from = c.received.length;
        const start = performance.now();
        c.send({ type: "env_step", id: "e", responses: ids.map((env_id) => ({ env_id, text: "" })) });
        const r = await c.next(
          (f) => (f.type === "env_stepped" || f.type === "error") && c.received.indexOf(f) >= from,
          60_000,
        );
        times.push(Math.round(performance.now() - start));
        if (r.type === "error") refusal = String(r.message).slice(0, 120);
      }
      ctx.observed.push(observedBy(c));
      ctx.notes.push(
        `steps of 16,384 empty responses: ${times.length - (refusal ? 1 : 0)} accepted (${times.join(", ")} ms each), then ${refusal || "no refusal"}`,
      );
      expect(ctx, refusal.startsWith("max_held_bytes"), "empty steps are charged until a byte limit refuses");
      c.close();
    },
  },
  {
    name: "cross_origin_page_requests",
    covers: "#19.2",
    rssBoundMiB: bound(sockets(DEFAULT_CONNECTION_LIMITS.maxPendingConnections)), // refused before any body: sockets only
    async run(ctx) {
      // What a page of another origin (or one rebinding its name to us) makes a browser send.
      const evil = {
        origin: "http://evil.example",
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "cors",
      };
      // fetch cannot set Host: a rebinding page's requests go out raw.
      const rebound = { host: "evil.example:80", "sec-fetch-site": "same-origin" };
      const statuses = new Map<string, number>();
      const count = (what: string) => statuses.set(what, (statuses.get(what) ?? 0) + 1);
      for (let i = 0; i < 50; i++) {
        for (const headers of [evil, rebound])
          for (const path of ["/v1/web", "/v1/episode-files", "/v1/envs/Bandit/play?seed=1&actions=Left"])
            count(`GET ${await rawStatus(ctx.url, path, headers)}`);
        const ws = new WebSocket(`${ctx.url.replace(/^http/, "ws")}/v1/rollouts`, {
          origin: "http://evil.example",
        });
        count(
          `WS ${await new Promise<string>((resolve) => {
            ws.on("open", () => resolve("open"));
            ws.on("unexpected-response", (_q, res) => resolve(String(res.statusCode)));
            ws.on("error", () => resolve("error"));
          })}`,
        );
        ws.terminate();
      }
      // 8 uploads of 32 MiB from that origin at once: refused before their bodies are read.
      const big = Buffer.alloc(32 * MiB, 0x78);
      const uploads = await Promise.all(
        Array.from({ length: 8 }, () =>
          fetch(`${ctx.url}/v1/episode-files`, { method: "POST", headers: evil, body: big }).then(
            (r) => String(r.status),
            () => "cut",
          ),
        ),
      );
      for (const u of uploads) count(`POST ${u}`);
      ctx.observed.push([...statuses].map(([k, v]) => `${v}× ${k}`).join(", "));
      expect(
        ctx,
        ![...statuses.keys()].some((k) => /200|open/.test(k)),
        "nothing from another origin is served",
      );
    },
  },
  {
    name: "tokenless_uploads_on_token_server",
    covers: "#19.4",
    rssBoundMiB: bound(uploads(), sockets(DEFAULT_CONNECTION_LIMITS.maxPendingConnections)), // uploads with the token; tokenless ones refused at the headers
    token: true,
    async run(ctx) {
      // 144 uploads announcing 32 MiB without the token, all at once (the issue's 5.2 GiB), each
      // sending its first MiB and then waiting for an answer.
      const chunk = Buffer.alloc(MiB, 0x78);
      const send = (headers: Record<string, string>) =>
        rawStatus(ctx.url, "/v1/episode-files", { ...headers, "content-length": String(32 * MiB) }, chunk);
      const tokenless = await Promise.all(
        Array.from({ length: 144 }, () => send({ "content-type": "text/plain" })),
      );
      // And 16 at once with the token: at most max_concurrent_uploads are read at a time.
      const authorized = await Promise.all(
        Array.from({ length: 16 }, () =>
          send({ authorization: `Bearer ${TOKEN}`, "content-type": "text/plain" }),
        ),
      );
      const tally = (xs: string[]) => {
        const m = new Map<string, number>();
        for (const x of xs) m.set(x, (m.get(x) ?? 0) + 1);
        return [...m].map(([k, v]) => `${v}× ${k}`).join(" ");
      };
      ctx.observed.push(`tokenless: ${tally(tokenless)}; with the token: ${tally(authorized)}`);
      expect(
        ctx,
        tokenless.every((s) => s === "401" || s === "cut"),
        "every tokenless upload refused with 401",
      );
      expect(
        ctx,
        authorized.some((s) => s === "503"),
        "uploads past max_concurrent_uploads get 503",
      );
    },
  },
  {
    name: "idle_hellod_sockets_fill_max_connections",
    covers: "#19.6",
    rssBoundMiB: bound(sockets(DEFAULT_CONNECTION_LIMITS.maxConnections)), // max_connections sockets
    // Until the attackers' sockets have been idle for idle_drop_s, max_connections refuses the
    // bystander too (the documented cap); then idle ones make room.
    bystanderRefusedOk: true,
    run: (ctx) => fillMaxConnections(ctx, false),
  },
  {
    name: "idle_watchers_hold_max_watchers",
    covers: "#19.6 (watchers)",
    rssBoundMiB: bound(watchers(), sockets(34)), // every watcher's buffer
    run: (ctx) => holdMaxWatchers(ctx, false),
  },
  {
    name: "keepalive_sockets_fill_max_connections",
    covers: "#28.4",
    rssBoundMiB: bound(sockets(DEFAULT_CONNECTION_LIMITS.maxConnections)), // max_connections sockets
    // As the idle row: refused until idle_drop_s has passed since the attackers' last work.
    bystanderRefusedOk: true,
    run: (ctx) => fillMaxConnections(ctx, true),
  },
  {
    name: "keepalive_watchers_hold_max_watchers",
    covers: "#28.4 (watchers)",
    rssBoundMiB: bound(watchers(), sockets(34)), // every watcher's buffer
    run: (ctx) => holdMaxWatchers(ctx, true),
  },
  {
    name: "uploads_30MB_lines_parse",
    covers: "#19.5",
    // Uploads kept, being received (max_concurrent_uploads × 32 MiB, twice) and being checked.
    rssBoundMiB: bound(uploads()),
    async run(ctx) {
      const { header, summary } = EMPTY_FILE_LINES;
      const n = 15 * MiB;
      // A line of nested arrays (the issue's parser attack) and a sound one, a header whose
      // settings hold a flat array of numbers (slow to parse but valid).
      const nested = `${header}\n${"[".repeat(n)}${"]".repeat(n)}\n${summary}\n`;
      const flat = `${header.replace('"settings":{}', `"settings":{"numbers":[${"1,".repeat(n / 2 - 1)}1]}`)}\n${summary}\n`;
      const statuses = new Map<string, number>();
      for (const [what, body] of [
        ["nested", nested],
        ["flat", flat],
      ] as const) {
        const results = await Promise.all(
          Array.from({ length: 8 }, () =>
            fetch(`${ctx.url}/v1/episode-files`, { method: "POST", body }).then(
              async (r) =>
                `${r.status}${r.ok ? "" : ` ${((await r.json()) as { error: { message: string } }).error.message.slice(0, 40)}`}`,
              () => "cut",
            ),
          ),
        );
        for (const r of results) statuses.set(`${what} ${r}`, (statuses.get(`${what} ${r}`) ?? 0) + 1);
      }
      ctx.observed.push([...statuses].map(([k, v]) => `${v}× ${k}`).join("; "));
      expect(
        ctx,
        [...statuses.keys()].some((k) => k.startsWith("flat 200")),
        "sound 30 MB uploads are taken",
      );
      expect(
        ctx,
        ![...statuses.keys()].some((k) => k.startsWith("nested 200")),
        "the nested line is refused",
      );
    },
  },
  {
    name: "crafted_episode_file_markup",
    covers: "#19.3",
    rssBoundMiB: bound(uploads()), // uploads kept, received and checked
    async run(ctx) {
      // Markup in every string and number field of an episode file: the server takes or refuses
      // it, serves it back only as NDJSON that browsers must not sniff, and its page runs only its
      // own scripts (the browser side is test/web/hostile.test.ts).
      const markup = `"'><img src=x onerror=alert(1)><script>alert(2)</script>`;
      const header = JSON.stringify({
        type: "header",
        format: "rollgym.episodes",
        version: 1,
        mode: markup,
        seed: markup,
        group_size: markup,
        tags: [{ tag: markup, groups: markup }],
        policy: markup,
        settings: {},
      });
      const group = JSON.stringify({
        type: "group",
        group_id: markup,
        tag: markup,
        seed: markup,
        env_ids: [markup],
        kept: markup,
        score: markup,
      });
      const episode = JSON.stringify({
        type: "episode",
        env_id: markup,
        group_id: markup,
        tag: markup,
        seed: markup,
        reward: markup,
        turns: [
          { turn: markup, state: markup, raw_response: markup, actions: [markup], reward_text: markup },
        ],
        final_state: markup,
        end_reason: markup,
      });
      const summary = JSON.stringify({
        type: "summary",
        episodes: markup,
        failed: markup,
        kept_groups: [markup],
        metrics: { [markup]: markup },
      });
      const text = `${header}\n${group}\n${episode}\n${summary}\n`;
      const statuses: string[] = [];
      for (let i = 0; i < 100; i++) {
        const r = await fetch(`${ctx.url}/v1/episode-files`, { method: "POST", body: text });
        const body = (await r.json()) as { id?: string };
        statuses.push(String(r.status));
        if (body.id) {
          const back = await fetch(`${ctx.url}/v1/episode-files/uploads/${body.id}`);
          await back.text();
          expect(ctx, back.headers.get("x-content-type-options") === "nosniff", "served back with nosniff");
          expect(ctx, /ndjson/.test(back.headers.get("content-type") ?? ""), "served back as NDJSON");
        }
      }
      const page = await fetch(`${ctx.url}/`);
      await page.text();
      const csp = page.headers.get("content-security-policy") ?? "";
      ctx.observed.push(`uploads: ${[...new Set(statuses)].join(",")}; page CSP: ${csp.slice(0, 60)}…`);
      expect(ctx, /script-src 'self'/.test(csp) && /frame-ancestors/.test(csp), "the page sends its CSP");
    },
  },
  {
    name: "symlink_swap_in_share",
    covers: "#19.8",
    rssBoundMiB: bound(sockets(DEFAULT_CONNECTION_LIMITS.maxPendingConnections)), // shared files are streamed: sockets only
    serveArgs: ["--share", SHARE_DIR],
    async run(ctx) {
      // Flip a shared name between a regular file and a link to a file outside the directory.
      const target = join(SHARE_DIR, "run.jsonl");
      const secret = join(SHARE_DIR, "..", "secret.jsonl");
      const real = join(SHARE_DIR, "..", "real.jsonl");
      writeFileSync(secret, "SECRET\n");
      writeFileSync(real, "{}\n");
      let flips = 0;
      let flipping = true;
      const flip = () => {
        if (!flipping) return;
        const next = join(SHARE_DIR, ".next");
        rmSync(next, { force: true });
        if (flips++ % 2) symlinkSync(secret, next);
        else copyFileSync(real, next);
        renameSync(next, target);
        setImmediate(flip);
      };
      flip();
      let leaked = 0;
      const codes = new Map<number, number>();
      for (let i = 0; i < 728; i++) {
        const r = await fetch(`${ctx.url}/v1/episode-files/shared/run.jsonl`);
        if ((await r.text()).includes("SECRET")) leaked++;
        codes.set(r.status, (codes.get(r.status) ?? 0) + 1);
      }
      flipping = false;
      ctx.observed.push(
        `728 tries: ${[...codes].map(([k, v]) => `${v}× ${k}`).join(", ")}; the link's target served ${leaked} times`,
      );
      ctx.notes.push(`${flips} flips`);
      expect(ctx, leaked === 0, "a swapped-in link is never followed");
    },
  },
  {
    name: "wide_maps_and_connection_storm",
    covers: "#19.7",
    // Two attacking connections at a time: each holds at most one frame being received
    // (max_frame_bytes) and one socket read, and the server decodes one frame at a time, at most
    // MAX_CLIENT_DECODED_BYTES; then 200 sockets (docs/server.md "Memory bounds, from the limits").
    rssBoundMiB: bound(frames(2), sockets(200)),
    async run(ctx) {
      // Two clients sending 1 MiB maps of 90,000 keys for 10 s, then two sending frames of a
      // million empty maps (64 MiB once decoded) for 10 s, both reconnecting when closed; then
      // two sending frames of 200,000 empty maps (within every bound, and the costliest bytes
      // to decode) for 10 s, paced; then 200 clients connecting at once.
      const wide = encodeMessage({
        type: "credit",
        groups: 1,
        ...Object.fromEntries(Array.from({ length: 90_000 }, (_, i) => [`k${i}`, i])),
      });
      const expanding = encodeMessage({
        type: "credit",
        groups: 1,
        xs: Array.from({ length: 1_000_000 }, () => ({})),
      });
      const costly = encodeMessage({
        type: "credit",
        groups: 1,
        xs: Array.from({ length: 200_000 }, () => ({})),
      });
      const closes = new Map<number, number>();
      /** Two clients sending `frame` every 5 ms for 10 s, reconnecting when closed; frames sent. */
      const flood = async (frame: Uint8Array, name: string): Promise<number> => {
        let sent = 0;
        const stop = performance.now() + 10_000;
        await Promise.all(
          [0, 1].map(async (i) => {
            while (performance.now() < stop) {
              const c = await connect(ctx.url, `${name}${i}`).catch(() => null);
              if (!c) continue;
              while (c.closeCode === null && performance.now() < stop) {
                c.ws.send(frame);
                sent++;
                await sleep(5);
              }
              await Promise.race([c.closed(), sleep(1000)]);
              if (c.closeCode !== null) closes.set(c.closeCode, (closes.get(c.closeCode) ?? 0) + 1);
              c.ws.terminate();
            }
          }),
        );
        return sent;
      };
      const sent = await flood(wide, "wide");
      const wideCloses = closes.get(1002) ?? 0;
      const expandingSent = await flood(expanding, "expanding");
      const expandingCloses = (closes.get(1002) ?? 0) - wideCloses;
      const costlyClients = await Promise.all([0, 1].map((i) => connect(ctx.url, `costly${i}`)));
      let costlySent = 0;
      const costlyStop = performance.now() + 10_000;
      while (performance.now() < costlyStop) {
        // One more frame each whenever the previous ones were answered (no pile-up in this process).
        for (const c of costlyClients)
          if (c.of("error").length >= costlySent / 2 - 1) {
            c.ws.send(costly);
            costlySent++;
          }
        await sleep(50);
      }
      const costlyHandled = costlyClients.reduce((n, c) => n + c.of("error").length, 0);
      for (const c of costlyClients) c.ws.terminate();
      const storm = await Promise.allSettled(
        Array.from({ length: 200 }, (_, i) => connect(ctx.url, `storm${i}`)),
      );
      const welcomed = storm.filter((r) => r.status === "fulfilled").length;
      for (const r of storm) if (r.status === "fulfilled") r.value.close();
      ctx.observed.push(
        `wide maps: ${sent} sent, ${wideCloses}× close 1002; a million empty maps: ${expandingSent} sent, ${expandingCloses}× close 1002; 200,000 empty maps: ${costlyHandled} of ${costlySent} answered in 10 s; storm: ${welcomed}/200 welcomed`,
      );
      expect(ctx, wideCloses > 0, "a wide map closes its connection with 1002");
      expect(
        ctx,
        expandingCloses > 0,
        "a frame decoding past MAX_CLIENT_DECODED_BYTES closes its connection with 1002",
      );
      expect(ctx, costlyHandled > 0, "frames within the bounds are answered");
      expect(ctx, welcomed === 200, "all 200 storm clients get in");
    },
  },
];

interface Result {
  name: string;
  covers: string;
  up: boolean;
  healthz_worst_ms: number;
  healthz_failures: number;
  rss_growth_mib: number;
  rss_peak_growth_mib: number;
  /** The row's RSS bound, derived from the limits (bench/attacks/bounds.ts). */
  rss_bound_mib: number;
  /** The server's CPU use during the attack, in cores (1 = one core busy the whole time). */
  server_cpu: number;
  bystander: ProbeReport;
  offender: string;
  check: string;
  bounds: string;
  notes: string;
}

async function runOne(attack: Attack): Promise<Result> {
  const engine = attack.engine ? await attack.engine() : null;
  const args = [...(attack.serveArgs ?? [])];
  if (engine) args.push("--llm", engine.url.endsWith("/v1") ? engine.url : `${engine.url}/v1`);
  if (attack.token) args.push("--token", TOKEN);
  const serve = await startServe(args);
  const token = attack.token ? TOKEN : undefined;
  // Warm up (a rollout of each delivery, /healthz) so RSS growth is the attack's.
  await goodRollout(serve.url, "warm1", 60_000, { groups: 2, groupSize: 2, delivery: "stream" }, token);
  await goodRollout(serve.url, "warm2", 60_000, { groups: 2, groupSize: 2, delivery: "batch" }, token);
  await fetch(`${serve.url}/healthz`);
  const rssBefore = serve.rss();
  const hwmBefore = serve.hwm();
  const prober = startProber(serve.url, token);
  const cpuBefore = serve.cpuSeconds();
  const wallBefore = performance.now();
  await sleep(300);
  const ctx: Ctx = { url: serve.url, serve, token, failures: [], notes: [], observed: [] };
  try {
    await Promise.race([
      attack.run(ctx),
      sleep(attack.timeoutMs ?? ATTACK_TIMEOUT_MS).then(() => {
        throw new Error(`attack did not finish in ${(attack.timeoutMs ?? ATTACK_TIMEOUT_MS) / 1000} s`);
      }),
    ]);
  } catch (e) {
    ctx.failures.push((e as Error).message);
  }
  await sleep(500);
  const bystander = await prober.stop();
  const up =
    serve.alive() &&
    (await fetch(`${serve.url}/healthz`, { signal: AbortSignal.timeout(5000) }).then(
      (r) => r.ok,
      () => false,
    ));
  const rssAfter = serve.rss();
  const cpuShare = (serve.cpuSeconds() - cpuBefore) / ((performance.now() - wallBefore) / 1000);
  const hwmAfter = serve.hwm();
  const crashed = serve.alive() ? "" : ` (server exited: ${serve.stderr().slice(-300)})`;
  await serve.stop(10_000);
  await engine?.stop();
  const rssGrowth = (rssAfter - rssBefore) / MiB;
  const peakGrowth = (Math.max(hwmAfter, hwmBefore) - rssBefore) / MiB;
  const bound = attack.rssBoundMiB;
  const over: string[] = [];
  if (!up) over.push(`down${crashed}`);
  if (!(bystander.healthz_worst_ms < 1000)) over.push("/healthz ≥ 1 s");
  if (!(rssGrowth < bound) || !(peakGrowth < bound)) over.push(`RSS ≥ ${bound} MiB`);
  if (bystander.rollouts_completed === 0 || (bystander.rollouts_failed > 0 && !attack.bystanderRefusedOk))
    over.push("bystander not served");
  return {
    name: attack.name,
    covers: attack.covers,
    up,
    healthz_worst_ms: bystander.healthz_worst_ms,
    healthz_failures: bystander.healthz_failures,
    rss_growth_mib: Math.round(rssGrowth),
    rss_peak_growth_mib: Math.round(peakGrowth),
    rss_bound_mib: bound,
    server_cpu: Number(cpuShare.toFixed(2)),
    bystander,
    offender: ctx.observed.join("; "),
    check: ctx.failures.length === 0 ? "ok" : `FAIL: ${ctx.failures.join("; ").replaceAll("\n", " ")}`,
    bounds: over.length === 0 ? "within" : `over: ${over.join(", ")}`,
    notes: ctx.notes.join("; "),
  };
}

const selected = values.only ? attacks.filter((a) => values.only!.split(",").includes(a.name)) : attacks;
if (selected.length === 0)
  throw new Error(`no attack named ${values.only}; known: ${attacks.map((a) => a.name).join(", ")}`);
const results: Result[] = [];
const row = (cells: (string | number)[]) => `| ${cells.join(" | ")} |`;
console.log(
  row([
    "attack",
    "covers",
    "up",
    "worst /healthz ms",
    "RSS growth MiB (peak)",
    "bound MiB",
    "server CPU (cores)",
    "bystander rollouts ok/failed",
    "offending client saw",
    "check",
    "#10 bounds",
    "notes",
  ]),
);
console.log(row(["---", "---", "---", "---:", "---:", "---:", "---:", "---", "---", "---", "---", "---"]));
for (const attack of selected) {
  const r = await runOne(attack).catch(
    (error: Error): Result => ({
      name: attack.name,
      covers: attack.covers,
      up: false,
      healthz_worst_ms: Number.NaN,
      healthz_failures: Number.NaN,
      rss_growth_mib: Number.NaN,
      rss_peak_growth_mib: Number.NaN,
      rss_bound_mib: attack.rssBoundMiB,
      server_cpu: Number.NaN,
      bystander: probeReport(Number.NaN),
      offender: "",
      check: `FAIL: ${error.message.replaceAll("\n", " ")}`,
      bounds: "over: bench failed",
      notes: "",
    }),
  );
  results.push(r);
  const b = r.bystander;
  console.log(
    row([
      r.name,
      r.covers,
      r.up ? "yes" : "no",
      `${r.healthz_worst_ms}${b.healthz_over_1s ? ` (${b.healthz_over_1s} ≥ 1 s, worst at ${b.healthz_worst_at_s} s)` : ""}${r.healthz_failures ? ` (${r.healthz_failures} failed)` : ""}`,
      `${r.rss_growth_mib} (${r.rss_peak_growth_mib})`,
      r.rss_bound_mib,
      r.server_cpu,
      `${b.rollouts_completed}/${b.rollouts_failed}${b.last_failure ? ` (${b.last_failure.slice(0, 100)})` : ""}`,
      r.offender,
      r.check,
      r.bounds,
      r.notes,
    ]),
  );
}
if (values.json)
  writeFileSync(values.json, `${JSON.stringify({ date: new Date().toISOString(), results }, null, 2)}\n`);
// Sockets and child processes may linger; the run is over.
process.exit(0);
