// Several clients at once against one real server: well-behaved trainers (credit, acks, stream
// and batch delivery, the built-in oracle policy) beside hostile clients sending generated
// sequences of valid and invalid frames (bad fields, unknown types, wrong ids, acks for unknown
// groups, cancels, env hosting with junk, credit abuse, junk bytes, oversized frames, early
// closes, not reading). Properties: the server survives; every rollout of every well-behaved
// client completes with every group delivered exactly once and its verdict; hostile clients get
// only server frames, documented error codes and documented close codes; once everyone has
// left, the server holds no session and no episode.
import { readFileSync } from "node:fs";
import { encode } from "@msgpack/msgpack";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AckSchema,
  CancelSchema,
  CreditSchema,
  EnvCloseSchema,
  EnvOpenSchema,
  EnvStepSchema,
  RolloutRequestSchema,
  validateServerMessage,
} from "../../protocol/messages.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { TestClient } from "../helpers/ws-client.ts";
import { anyValue, arbitraryFor } from "../protocol/arbitrary.ts";

const MAX_FRAME_BYTES = 64 * 1024;
const TAGS = ["Bandit", "SimpleSokoban", "CoordSokoban"];

/** The codes of a markdown table in PROTOCOL.md's section `heading` (first column). */
function documented(heading: string): Set<string> {
  const text = readFileSync(new URL("../../protocol/PROTOCOL.md", import.meta.url), "utf8");
  const section = text.split(/^## /m).find((s) => s.startsWith(heading));
  if (!section) throw new Error(`PROTOCOL.md has no section ${heading}`);
  return new Set([...section.matchAll(/^\| `?([\w]+)`? \|/gm)].map((m) => m[1]).filter((c) => c !== "code"));
}
const ERROR_CODES = documented("Error codes");
const CLOSE_CODES = new Set([...documented("Close codes")].map(Number));

// ---------------------------------------------------------------------------------------------
// Well-behaved clients
// ---------------------------------------------------------------------------------------------

interface GoodRollout {
  tag: string;
  groups: number;
  groupSize: number;
  delivery: "stream" | "batch";
  seed: number;
}
interface GoodClient {
  rollouts: GoodRollout[];
  /** Credit one group at a time (and one more per ack), or plenty up front. */
  credit: "trickle" | "lump";
}

const goodRollout: fc.Arbitrary<GoodRollout> = fc.record({
  tag: fc.constantFrom(...TAGS),
  groups: fc.integer({ min: 1, max: 5 }),
  groupSize: fc.integer({ min: 1, max: 3 }),
  delivery: fc.constantFrom("stream" as const, "batch" as const),
  seed: fc.integer({ min: 0, max: 1_000_000 }),
});
const goodClient: fc.Arbitrary<GoodClient> = fc.record({
  rollouts: fc.array(goodRollout, { minLength: 1, maxLength: 3 }),
  credit: fc.constantFrom("trickle" as const, "lump" as const),
});

/** Plays the client's rollouts at once on one connection; returns what went wrong (empty: nothing). */
async function playGood(url: string, spec: GoodClient, index: number): Promise<string[]> {
  const problems: string[] = [];
  const c = await TestClient.connect(url, { hello: { type: "hello", protocol: 1, client: `good${index}` } });
  const ids = spec.rollouts.map((_, i) => `g${index}-${i}`);
  const counts = new Map<string, number>();
  c.ws.on("message", () => {
    const f = c.received.at(-1)!;
    if (f.type === "group") {
      const key = `${f.rollout}/${f.group}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
      c.send({ type: "ack", rollout: f.rollout, groups: [f.group] });
      if (spec.credit === "trickle") c.send({ type: "credit", groups: 1 });
    }
    if (f.type === "batch") c.send({ type: "ack", rollout: f.rollout, groups: [], batch: true });
  });
  c.send({ type: "credit", groups: spec.credit === "trickle" ? 1 : 1000 });
  for (const [i, r] of spec.rollouts.entries()) {
    c.send({
      type: "rollout",
      id: ids[i],
      tags: [{ tag: r.tag, groups: r.groups }],
      mode: "train",
      group_size: r.groupSize,
      seed: r.seed,
      delivery: r.delivery,
    });
  }
  for (const [i, r] of spec.rollouts.entries()) {
    const id = ids[i];
    const end = await c
      .next((f) => f.rollout === id && (f.type === "batch" || f.type === "error"), 120_000)
      .catch(() => null);
    if (end === null) {
      problems.push(`${id}: no batch frame`);
      continue;
    }
    if (end.type === "error") {
      problems.push(`${id}: error ${end.code} ${end.message}`);
      continue;
    }
    if (end.failed !== 0) problems.push(`${id}: ${end.failed} failed episodes`);
    const kept = end.kept as number[];
    const all = [...kept, ...(end.dropped as number[]), ...(end.failed_groups as number[])].sort(
      (a, b) => a - b,
    );
    if (all.join() !== Array.from({ length: r.groups }, (_, g) => g).join())
      problems.push(`${id}: verdict names groups ${all.join(",")}`);
    const expected = r.delivery === "stream" ? Array.from({ length: r.groups }, (_, g) => g) : kept;
    for (const g of expected) {
      const n = counts.get(`${id}/${g}`) ?? 0;
      if (n !== 1) problems.push(`${id}: group ${g} delivered ${n} times`);
    }
    const delivered = [...counts.keys()].filter((k) => k.startsWith(`${id}/`)).length;
    if (delivered !== expected.length)
      problems.push(`${id}: ${delivered} distinct groups, want ${expected.length}`);
  }
  const seqs = c.of("group").map((f) => f.seq as number);
  if (seqs.some((s, i) => i > 0 && s <= seqs[i - 1])) problems.push(`seqs not increasing: ${seqs.join(",")}`);
  const errors = c.of("error");
  if (errors.length) problems.push(`errors: ${errors.map((e) => `${e.code} ${e.message}`).join("; ")}`);
  c.close();
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Hostile clients
// ---------------------------------------------------------------------------------------------

type HostileAction =
  | { kind: "frame"; frame: Record<string, unknown> }
  | { kind: "bytes"; bytes: Uint8Array; binary: boolean }
  | { kind: "oversized" }
  | { kind: "pause" }
  | { kind: "resume" }
  | { kind: "close" }
  | { kind: "reconnect-without-hello"; frame: Record<string, unknown> }
  | { kind: "wait"; ms: number };

/** Small sizes: a hostile valid rollout must not take the machine (huge ones are refused anyway). */
function smallWork<T extends Record<string, unknown>>(frame: T): T {
  const out: Record<string, unknown> = { ...frame };
  if (Array.isArray(out.tags))
    out.tags = (out.tags as { tag: string; groups: number }[]).slice(0, 2).map((t, i) => ({
      tag: i % 2 ? t.tag : TAGS[t.groups % TAGS.length],
      groups: 1 + (t.groups % 4),
    }));
  if (typeof out.groups === "number" && out.type === "env_open") out.groups = 1 + (out.groups % 4);
  if (typeof out.group_size === "number") out.group_size = 1 + ((out.group_size as number) % 4);
  if (typeof out.max_turn === "number") out.max_turn = 1 + ((out.max_turn as number) % 5);
  if (out.type === "env_open" && typeof out.tag === "string") out.tag = TAGS[(out.tag as string).length % 3];
  delete out.tokens;
  return out as T;
}

const ids = fc.constantFrom("a", "b", "g0-0", "x", "");
const validFrame = fc.oneof(
  arbitraryFor(RolloutRequestSchema).map((f) => smallWork(f as Record<string, unknown>)),
  arbitraryFor(EnvOpenSchema).map((f) => smallWork(f as Record<string, unknown>)),
  arbitraryFor(CreditSchema),
  arbitraryFor(AckSchema),
  arbitraryFor(CancelSchema),
  arbitraryFor(EnvStepSchema),
  arbitraryFor(EnvCloseSchema),
  fc.constantFrom({ type: "watch" }, { type: "unwatch" }, { type: "hello", protocol: 1, client: "again" }),
) as fc.Arbitrary<Record<string, unknown>>;

/** A valid frame with one field replaced, removed or added; or a frame of the wrong type. */
const badFrame: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.tuple(validFrame, fc.nat(), anyValue).map(([f, k, v]) => {
    const keys = Object.keys(f).filter((key) => key !== "type");
    if (keys.length === 0) return { ...f, extra: v };
    return { ...f, [keys[k % keys.length]]: v };
  }),
  fc.tuple(validFrame, fc.nat()).map(([f, k]) => {
    const keys = Object.keys(f).filter((key) => key !== "type");
    const copy = { ...f };
    if (keys.length) delete copy[keys[k % keys.length]];
    return copy;
  }),
  fc.string({ maxLength: 12 }).map((type) => ({ type })),
  fc.constantFrom(
    { type: "rolout", id: "x" },
    { type: "CREDIT", groups: 1 },
    { type: "credit", groups: 0 },
    { type: "credit", groups: -5 },
    { type: "credit", groups: 1e12 },
    {
      type: "rollout",
      id: "h",
      tags: [{ tag: "NoSuchTag", groups: 1 }],
      mode: "train",
      group_size: 1,
      delivery: "batch",
    },
    {
      type: "rollout",
      id: "h",
      tags: [{ tag: "Bandit", groups: 4096 }],
      mode: "train",
      group_size: 4096,
      delivery: "stream",
    },
    { type: "env_open", id: "e", tag: "Bandit", groups: 4096, group_size: 4096 },
    {
      type: "rollout",
      id: "s",
      tags: [{ tag: "Bandit", groups: 8 }],
      mode: "train",
      group_size: 2,
      seed: 4294967295,
      delivery: "batch",
    },
  ),
);

/** Frames about things that do not exist, or that belong to someone else. */
const wrongIdFrame: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc
    .tuple(ids, fc.array(fc.integer({ min: 0, max: 10 }), { maxLength: 5 }), fc.boolean())
    .map(([rollout, groups, batch]) => ({
      type: "ack",
      rollout,
      groups,
      batch,
    })),
  ids.map((rollout) => ({ type: "cancel", rollout })),
  fc.tuple(ids, fc.integer({ min: 0, max: 20 }), fc.string({ maxLength: 40 })).map(([id, envId, text]) => ({
    type: "env_step",
    id,
    responses: [{ env_id: envId, text }],
  })),
  ids.map((id) => ({ type: "env_close", id })),
  fc.constant({ type: "credit", groups: 1_000_000 }),
);

const hostileAction: fc.Arbitrary<HostileAction> = fc.oneof(
  { weight: 4, arbitrary: validFrame.map((frame) => ({ kind: "frame" as const, frame })) },
  { weight: 4, arbitrary: badFrame.map((frame) => ({ kind: "frame" as const, frame })) },
  { weight: 4, arbitrary: wrongIdFrame.map((frame) => ({ kind: "frame" as const, frame })) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.uint8Array({ minLength: 1, maxLength: 40 }), fc.boolean())
      .map(([bytes, binary]) => ({ kind: "bytes" as const, bytes, binary })),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "oversized" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "pause" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "resume" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "close" as const }) },
  {
    weight: 1,
    arbitrary: validFrame.map((frame) => ({ kind: "reconnect-without-hello" as const, frame })),
  },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 30 }).map((ms) => ({ kind: "wait" as const, ms })) },
);

interface HostileLog {
  /** Server-initiated closes: code and reason. */
  closes: { code: number; reason: string }[];
  frames: Record<string, unknown>[];
}

async function playHostile(url: string, actions: HostileAction[], index: number): Promise<HostileLog> {
  const log: HostileLog = { closes: [], frames: [] };
  let client: TestClient | null = null;
  let closedByUs = false;
  const watchClose = (c: TestClient) => {
    c.ws.on("error", () => {});
    void c.closed().then(() => {
      if (!closedByUs) log.closes.push({ code: c.closeCode!, reason: c.closeReason });
      log.frames.push(...c.received);
    });
  };
  const open = async (hello: boolean) => {
    closedByUs = false;
    client = await TestClient.connect(url, {
      hello: hello ? { type: "hello", protocol: 1, client: `hostile${index}` } : null,
    });
    watchClose(client);
    return client;
  };
  for (const action of actions) {
    let c = client as TestClient | null;
    if (c === null || c.closeCode !== null || c.ws.readyState !== c.ws.OPEN) c = await open(true);
    switch (action.kind) {
      case "frame":
        c.send(action.frame);
        break;
      case "bytes":
        c.ws.send(action.bytes, { binary: action.binary });
        break;
      case "oversized":
        c.ws.send(
          encode({
            type: "env_step",
            id: "big",
            responses: [{ env_id: 0, text: "x".repeat(MAX_FRAME_BYTES) }],
          }),
        );
        break;
      case "pause":
        c.pauseReading();
        break;
      case "resume":
        c.resumeReading();
        break;
      case "close":
        closedByUs = true;
        await leave(c);
        client = null;
        break;
      case "reconnect-without-hello":
        closedByUs = true;
        await leave(c);
        c = await open(false);
        c.send(action.frame);
        break;
      case "wait":
        await new Promise((r) => setTimeout(r, action.ms));
        break;
    }
  }
  const last = client as TestClient | null;
  if (last && last.closeCode === null) {
    last.resumeReading();
    // Let the server answer what was sent, then leave.
    await new Promise((r) => setTimeout(r, 100));
    closedByUs = true;
    await leave(last);
  }
  return log;
}

/**
 * Closes from our side. A client that stopped reading would never see the server's close frame
 * (ws then waits 30 s): read again first, and cut the connection if the close does not complete.
 */
async function leave(c: TestClient): Promise<void> {
  c.resumeReading();
  c.close();
  await Promise.race([c.closed(), new Promise((r) => setTimeout(r, 2000))]);
  if (c.closeCode === null) {
    c.ws.terminate();
    await c.closed();
  }
}

function hostileProblems(log: HostileLog): string[] {
  const problems: string[] = [];
  for (const { code, reason } of log.closes)
    if (!CLOSE_CODES.has(code)) problems.push(`undocumented close ${code} (${reason})`);
  for (const f of log.frames) {
    const checked = validateServerMessage(f);
    if (!checked.ok) problems.push(`not a server message: ${checked.message}`);
    if (f.type === "error" && !ERROR_CODES.has(String(f.code)))
      problems.push(`undocumented error code ${f.code}`);
    if (f.type === "error" && f.code === "internal") problems.push(`internal error: ${f.message}`);
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  // Short grace: a hostile session's rollouts end soon after it leaves, so the server drains.
  server = await buildServer({ maxFrameBytes: MAX_FRAME_BYTES, resumeGraceMs: 200 });
  url = await server.listen(0, "127.0.0.1");
});
afterAll(async () => {
  await server?.shutdown();
});

describe("several clients at once, some hostile", () => {
  it("serves every well-behaved rollout exactly once; hostile clients get documented answers only", async () => {
    expect(CLOSE_CODES.has(1002) && ERROR_CODES.has("bad_frame")).toBe(true);
    await fc.assert(
      fc.asyncProperty(
        fc.array(goodClient, { minLength: 1, maxLength: 3 }),
        fc.array(fc.array(hostileAction, { minLength: 5, maxLength: 40 }), { minLength: 1, maxLength: 3 }),
        async (goods, hostiles) => {
          const [goodResults, hostileLogs] = await Promise.all([
            Promise.all(goods.map((g, i) => playGood(url, g, i))),
            Promise.all(hostiles.map((h, i) => playHostile(url, h, i))),
          ]);
          const problems = [
            ...goodResults.flatMap((p, i) => p.map((x) => `good ${i}: ${x}`)),
            ...hostileLogs.flatMap((log, i) => hostileProblems(log).map((x) => `hostile ${i}: ${x}`)),
          ];
          const health = await fetch(`${url}/healthz`);
          if (!health.ok) problems.push(`/healthz ${health.status}`);
          // Everyone has left: after the grace period nothing is held.
          for (
            let i = 0;
            i < 300 && (server.state.sessions.size > 0 || server.state.episodesInFlight !== 0);
            i++
          )
            await new Promise((r) => setTimeout(r, 50));
          if (server.state.sessions.size > 0) problems.push(`${server.state.sessions.size} sessions left`);
          if (server.state.episodesInFlight !== 0)
            problems.push(`${server.state.episodesInFlight} episodes still counted`);
          if (problems.length) throw new Error([...new Set(problems)].slice(0, 20).join("\n"));
        },
      ),
      { numRuns: 25, endOnFailure: true },
    );
  }, 600_000);
});
