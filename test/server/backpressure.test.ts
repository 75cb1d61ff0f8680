// Replies respect the socket's buffered bytes (docs/server.md "Backpressure"): a client that
// stops reading is paused at send_pause_bytes, its group frames wait in the outbox (none
// dropped), and a client that keeps not reading is closed with 4008; others are served meanwhile.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLOSE_CODES } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import type { Outbound } from "../../src/server/outbound.ts";
import { playToVerdict, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const PAUSE = 64 * 1024;
const HARD = 4 * 1024 * 1024;

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer({
    sendPauseBytes: PAUSE,
    maxSendBufferBytes: HARD,
    sendStallMs: 1_500,
    maxBufferedGroups: 1000,
    resumeGraceMs: 200,
  });
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

function outboundOf(client: TestClient): Outbound {
  const id = client.of("welcome")[0].session as string;
  return server.state.sessions.get(id)!.outbound!;
}

describe("a client that stops reading", () => {
  it("is paused, its frames wait unprocessed, then it is closed with 4008; others are served", async () => {
    const hog = await TestClient.connect(url);
    const out = outboundOf(hog);
    hog.pauseReading();
    // ≈117 kB of small frames, each answered with an env_opened or env_closed of 16 episodes.
    const pairs = 1500;
    for (let i = 0; i < pairs; i++) {
      hog.send({ type: "env_open", id: `e${i}`, tag: "SimpleSokoban", groups: 4, group_size: 4 });
      hog.send({ type: "env_close", id: `e${i}` });
    }
    await until(() => out.congested || !out.open);
    const bystander = await TestClient.connect(url);
    expect(await playToVerdict(bystander, rolloutFrame("fine", 8, 2))).toMatchObject({
      episodes: 16,
      failed: 0,
    });

    // Closed for not reading once send_stall_s passes; nothing more was queued meanwhile.
    await until(() => !out.open);
    // What the server buffered for it stayed near the pause mark (one reply past it), far under the hard mark.
    expect(out.peakBufferedBytes).toBeGreaterThan(PAUSE);
    expect(out.peakBufferedBytes).toBeLessThan(PAUSE + 1024 * 1024);
    // It stopped reading: most frames were never handled.
    const answered = hog.received.length;
    expect(out.peakDeferred).toBeLessThan(2 * pairs);
    hog.resumeReading();
    await hog.closed();
    expect(hog.closeCode).toBe(CLOSE_CODES.slowReader);
    expect(hog.closeReason).toMatch(/send_stall_s/);
    expect(hog.of("env_closed").length).toBeLessThan(pairs);
    expect(hog.received.length).toBeGreaterThanOrEqual(answered);
    expect(await playToVerdict(bystander, rolloutFrame("again", 8, 2))).toMatchObject({
      episodes: 16,
      failed: 0,
    });
    bystander.close();
  });

  it("holds group frames in the outbox while paused and delivers every one once it reads again", async () => {
    // Patient: the client may stay paused for the whole rollout.
    const patient = await buildServer({ sendPauseBytes: PAUSE, maxBufferedGroups: 1000 });
    const client = await TestClient.connect(await patient.listen(0));
    const session = patient.state.sessions.get(client.of("welcome")[0].session as string)!;
    const out = session.outbound!;
    client.pauseReading();
    client.send({ type: "credit", groups: 10_000 });
    client.send(rolloutFrame("s", 400, 16, { delivery: "stream" }));
    let queuedWhilePaused = 0;
    await until(() => {
      if (out.congested) queuedWhilePaused = Math.max(queuedWhilePaused, session.queuedFrames);
      return session.rollouts.get("s")?.batch != null;
    });
    expect(out.peakBufferedBytes).toBeGreaterThan(PAUSE);
    expect(queuedWhilePaused).toBeGreaterThan(0);
    // Group frames wait in the outbox, not in the socket: the socket holds about one frame past the mark.
    expect(out.peakBufferedBytes).toBeLessThan(PAUSE + 1024 * 1024);
    client.resumeReading();
    const batch = await client.next((f) => f.type === "batch" && f.rollout === "s");
    const groups = client.of("group").map((g) => g.group as number);
    expect(new Set(groups).size).toBe(400);
    expect(groups).toHaveLength(400);
    expect(batch).toMatchObject({ episodes: 6400 });
    expect(client.closeCode).toBeNull();
    client.close();
    await patient.shutdown();
  }, 120_000);

  it("is closed with 4008 when its buffered replies would pass max_send_buffer_bytes", async () => {
    // Pause mark = hard mark: the frame that would cross it closes the client instead.
    const strict = await buildServer({
      sendPauseBytes: HARD,
      maxSendBufferBytes: HARD,
      maxBufferedGroups: 1000,
    });
    const strictUrl = await strict.listen(0);
    const client = await TestClient.connect(strictUrl);
    const session = strict.state.sessions.get(client.of("welcome")[0].session as string)!;
    const out = session.outbound!;
    client.pauseReading();
    client.send({ type: "credit", groups: 10_000 });
    client.send(rolloutFrame("s", 1000, 16, { delivery: "stream" }));
    await until(() => !out.open);
    expect(out.peakBufferedBytes).toBeLessThanOrEqual(HARD);
    client.resumeReading();
    await client.closed();
    expect(client.closeCode).toBe(CLOSE_CODES.slowReader);
    expect(client.closeReason).toMatch(/max_send_buffer_bytes/);
    // The session waits for a resume, its unsent groups kept; other clients are served.
    expect(strict.state.sessions.get(session.id)).toBe(session);
    const other = await TestClient.connect(strictUrl);
    expect(await playToVerdict(other, rolloutFrame("o", 2, 2))).toMatchObject({ type: "batch", episodes: 4 });
    other.close();
    await strict.shutdown();
  }, 120_000);
});
