// The server under abuse: thousands of malformed, truncated, oversized and wrong-typed frames,
// and a slow client behind a 1,000-group rollout. Each bad frame gets an error frame or a
// documented close code; the server stays up and other clients are unaffected; memory stays
// bounded behind the slow client.
import { readFileSync } from "node:fs";
import { decode, encode } from "@msgpack/msgpack";
import seedrandom from "seedrandom";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { validateClientMessage } from "../../protocol/messages.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { spawnServe } from "../helpers/cli.ts";
import { type Frame, TestClient } from "../helpers/ws-client.ts";

const DOCUMENTED_CLOSES = new Set([1002, 1009, 4000]);

describe("malformed frames", () => {
  let server: RollgymServer;
  let url: string;
  beforeAll(async () => {
    server = await buildServer({ maxFrameBytes: 64 * 1024 });
    url = await server.listen(0);
  });
  afterAll(async () => {
    await server.shutdown();
  });

  it("10,000 bad frames: each gets an error frame or a documented close; others unaffected", async () => {
    const rng = seedrandom("fuzz");
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)];
    const valid: Record<string, unknown>[] = [
      {
        type: "rollout",
        id: "x",
        tags: [{ tag: "Bandit", groups: 1 }],
        mode: "train",
        group_size: 2,
        delivery: "batch",
      },
      { type: "credit", groups: 1 },
      { type: "ack", rollout: "x", groups: [0] },
      { type: "env_step", id: "e", responses: [{ env_id: 0, text: "hi" }] },
      { type: "env_open", id: "e", tag: "Bandit", groups: 1, group_size: 1 },
    ];
    const junkValues = [
      null,
      -1,
      1e308,
      "",
      "x".repeat(300),
      [],
      {},
      true,
      3.5,
      [1, 2],
      { a: 1 },
      Number.NaN,
    ];
    const makeFrame = (): { data: Uint8Array | string; binary: boolean } => {
      const kind = Math.floor(rng() * 8);
      if (kind === 0) return { data: "hello", binary: false };
      if (kind === 1)
        return {
          data: new Uint8Array(
            Array.from({ length: 1 + Math.floor(rng() * 40) }, () => Math.floor(rng() * 256)),
          ),
          binary: true,
        };
      if (kind === 2) {
        const full = encode(pick(valid));
        return { data: full.subarray(0, Math.max(1, Math.floor(rng() * (full.length - 1)))), binary: true };
      }
      if (kind === 3) return { data: new Uint8Array(64 * 1024 + 1 + Math.floor(rng() * 1000)), binary: true };
      if (kind === 4)
        return { data: encode(pick([1, "str", [1, 2], null, { notype: 1 }, { type: 5 }])), binary: true };
      // Wrong-typed or out-of-range fields in otherwise well-formed messages.
      const base = { ...pick(valid) };
      const keys = Object.keys(base).filter((k) => k !== "type");
      if (kind === 5) base[pick(keys)] = pick(junkValues);
      if (kind === 6) base[`extra_${Math.floor(rng() * 5)}`] = 1;
      if (kind === 7) base.type = pick(["rolout", "ack ", "CREDIT", "bye", ""]);
      return { data: encode(base), binary: true };
    };

    // A well-behaved client runs a rollout the whole time.
    const bystander = await TestClient.connect(url);
    bystander.send({
      type: "rollout",
      id: "fine",
      tags: [{ tag: "SimpleSokoban", groups: 20 }],
      mode: "train",
      group_size: 2,
      delivery: "stream",
    });
    bystander.send({ type: "credit", groups: 100 });

    // Only frames the protocol rejects count; a mutation that happens to stay valid is redrawn.
    const makeBadFrame = () => {
      for (;;) {
        const frame = makeFrame();
        if (!frame.binary || frame.data.length > 64 * 1024) return frame;
        let value: unknown;
        try {
          value = decode(frame.data as Uint8Array);
        } catch {
          return frame;
        }
        if (!validateClientMessage(value).ok) return frame;
      }
    };
    let client = await TestClient.connect(url);
    const outcomes = { error: 0, close: 0 };
    for (let i = 0; i < 10_000; i++) {
      const { data, binary } = makeBadFrame();
      const before = client.received.length;
      client.ws.send(data, { binary });
      const result = await Promise.race([
        client
          .next((f) => f.type === "error" && client.received.indexOf(f) >= before, 10_000)
          .then(() => "error" as const),
        client.closed().then(() => "close" as const),
      ]);
      if (result === "close") {
        if (!DOCUMENTED_CLOSES.has(client.closeCode!))
          throw new Error(`frame ${i}: close ${client.closeCode} ${client.closeReason}`);
        outcomes.close++;
        client = await TestClient.connect(url);
      } else {
        outcomes.error++;
      }
    }
    client.close();
    expect(outcomes.error + outcomes.close).toBe(10_000);
    expect(outcomes.error).toBeGreaterThan(1000);
    expect(outcomes.close).toBeGreaterThan(1000);

    const batch = await bystander.next((f) => f.type === "batch" && f.rollout === "fine");
    expect(batch).toMatchObject({ episodes: 40, failed: 0 });
    expect(bystander.of("group").filter((g) => g.rollout === "fine")).toHaveLength(20);
    expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });
  }, 300_000);
});

describe("a slow client behind a 1,000-group rollout", () => {
  it("keeps one group in flight, at most max_buffered_groups waiting, and RSS within 100 MiB", async () => {
    const { url, child } = await spawnServe(["--max-buffered-groups", "8"]);
    try {
      const rss = () =>
        Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))![1]) * 1024;
      const queued = async () => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return Number(/^rollgym_queued_groups (\S+)$/m.exec(text)![1]);
      };
      const client = await TestClient.connect(url);
      const startRss = rss();
      let peakRss = startRss;
      let peakQueued = 0;
      client.send({
        type: "rollout",
        id: "long",
        tags: [{ tag: "SimpleSokoban", groups: 1000 }],
        mode: "train",
        group_size: 2,
        delivery: "stream",
      });
      const seen = new Set<number>();
      for (let i = 0; i < 1000; i++) {
        client.send({ type: "credit", groups: 1 });
        const g: Frame = await client.next((f) => f.type === "group" && !seen.has(f.group as number));
        seen.add(g.group as number);
        expect(client.of("group")).toHaveLength(seen.size); // never a second group before the ack
        await new Promise((r) => setTimeout(r, 2));
        client.send({ type: "ack", rollout: "long", groups: [g.group as number] });
        if (i % 50 === 0) {
          peakRss = Math.max(peakRss, rss());
          peakQueued = Math.max(peakQueued, await queued());
        }
      }
      await client.next((f) => f.type === "batch");
      expect(seen.size).toBe(1000);
      // Unacknowledged groups per rollout: at most max_buffered_groups (8).
      expect(peakQueued).toBeLessThanOrEqual(8);
      expect(peakRss - startRss).toBeLessThan(100 * 1024 * 1024);
      client.close();
    } finally {
      child.kill("SIGTERM");
    }
  }, 300_000);
});
