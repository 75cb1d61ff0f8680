// CPU and memory per frame (issue 19.7): a client frame may not hold a map of more keys than any
// message needs, refused at the map's header before a key is decoded, so a 1 MiB map of 90,000
// keys costs no more than any other frame of its size; nor decode to more than
// MAX_CLIENT_DECODED_BYTES of heap (a megabyte of empty maps), refused before it is decoded. The
// connection that sent either is closed (1002). A frame within both that still costs much to
// decode (200,000 empty maps) paces its own client, so a bystander keeps going beside two
// clients sending nothing else.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeFrame, encodeMessage, MAX_CLIENT_MAP_KEYS } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { Outbound } from "../../src/server/outbound.ts";
import { playToVerdict, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const wide = (keys: number) =>
  encodeMessage({
    type: "credit",
    groups: 1,
    ...Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i])),
  });

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer();
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

describe("maps in client frames", () => {
  it(`decode up to ${MAX_CLIENT_MAP_KEYS} keys from a client; any number elsewhere`, () => {
    expect(() => decodeFrame(wide(MAX_CLIENT_MAP_KEYS - 2), "client")).not.toThrow();
    expect(() => decodeFrame(wide(90_000), "client")).toThrow(/undecodable frame: .*[Mm]ax length/);
    expect(() => decodeFrame(wide(90_000))).not.toThrow();
  });

  it("a 90,000-key map, or a megabyte of empty maps, closes its own connection with 1002; others carry on", async () => {
    const hostile = await Promise.all([TestClient.connect(url), TestClient.connect(url)]);
    const bystander = await TestClient.connect(url);
    const emptyMaps = encodeMessage({
      type: "credit",
      groups: 1,
      xs: Array.from({ length: 1_000_000 }, () => ({})),
    });
    hostile[0].ws.send(wide(90_000));
    hostile[1].ws.send(emptyMaps);
    for (const h of hostile) {
      await h.closed();
      expect(h.closeCode).toBe(1002);
    }
    expect(hostile[1].closeReason).toMatch(/would decode to more than/);
    bystander.send({ type: "env_open", id: "b", tag: "Bandit", groups: 1, group_size: 1 });
    expect(await bystander.next((f) => f.id === "b")).toMatchObject({ type: "env_opened" });
    bystander.close();
  });
});

describe("costly frames", () => {
  it("pace the client that sends them: a bystander completes its rollouts while few of them are handled", async () => {
    // 200,000 empty maps: within every limit (12 MiB decoded, under MAX_CLIENT_DECODED_BYTES),
    // and the costliest bytes to decode.
    const costly = encodeMessage({
      type: "credit",
      groups: 1,
      xs: Array.from({ length: 200_000 }, () => ({})),
    });
    const outbounds: Outbound[] = [];
    const run = (Outbound.prototype as unknown as { run: (task: () => void) => void }).run;
    (Outbound.prototype as unknown as { run: (task: () => void) => void }).run = function (
      this: Outbound,
      task: () => void,
    ) {
      if (!outbounds.includes(this)) outbounds.push(this);
      run.call(this, task);
    };
    try {
      const hostile = await Promise.all([TestClient.connect(url), TestClient.connect(url)]);
      const bystander = await TestClient.connect(url);
      // Each hostile client queues 20 costly frames at once; every one is answered with an error.
      for (const h of hostile) for (let i = 0; i < 20; i++) h.ws.send(costly);
      for (let i = 0; i < 5; i++) {
        const verdict = await playToVerdict(bystander, rolloutFrame(`b${i}`, 2, 2, { delivery: "stream" }));
        expect(verdict).toMatchObject({ type: "batch", failed: 0 });
      }
      const handled = hostile.map((h) => h.of("error").length);
      // The bystander's 5 rollouts took many turns of the event loop; the hostile clients got
      // well under their 40 frames handled meanwhile.
      expect(handled[0] + handled[1]).toBeLessThan(20);
      // Both hostile connections were paced (how long is the pacing's own arithmetic, not timed here).
      for (const out of outbounds.slice(0, 2)) expect(out.pacedMs).toBeGreaterThan(0);
      for (const c of [...hostile, bystander]) c.ws.terminate();
    } finally {
      (Outbound.prototype as unknown as { run: (task: () => void) => void }).run = run;
    }
  }, 120_000);
});
