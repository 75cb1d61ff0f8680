// Env hosting bounds per connection (open sessions, response bytes held, episodes against the
// budget), env_stepped replies the size of one turn (`messages: "new"`), and a large env_open
// built in slices while the server keeps answering.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeMessage } from "../../protocol/codec.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { HostedEnvs, OPEN_SLICE_EPISODES } from "../../src/server/env-host.ts";
import { Outbound } from "../../src/server/outbound.ts";
import { type Frame, TestClient } from "../helpers/ws-client.ts";

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  // A session's share of the memory budget: 16,000 bytes, of which each episode takes 2,048.
  server = await buildServer({ maxEnvSessionsPerConnection: 3, maxHeldBytesPerConnection: 16_000 });
  url = await server.listen(0);
});
afterAll(async () => {
  await server.shutdown();
});

type Chat = { role: string; content: string }[];

/** The next frame of `type` about env session `id` that arrived after `from` frames. */
function arrivedAfter(client: TestClient, from: number, type: string, id: string): Promise<Frame> {
  return client.next((f) => f.type === type && f.id === id && client.received.indexOf(f) >= from);
}

describe("env hosting bounds", () => {
  it("caps open env sessions per connection", async () => {
    const client = await TestClient.connect(url);
    for (const id of ["a", "b", "c"]) {
      client.send({ type: "env_open", id, tag: "Bandit", groups: 1, group_size: 1 });
      await client.next((f) => f.type === "env_opened" && f.id === id);
    }
    client.send({ type: "env_open", id: "d", tag: "Bandit", groups: 1, group_size: 1 });
    const refused = await client.next((f) => f.type === "error" && f.id === "d");
    expect(refused).toMatchObject({ code: "limit" });
    expect(refused.message).toMatch(/max_env_sessions_per_connection is 3/);
    // Another connection has its own sessions.
    const other = await TestClient.connect(url);
    other.send({ type: "env_open", id: "d", tag: "Bandit", groups: 1, group_size: 1 });
    expect(await other.next((f) => f.id === "d")).toMatchObject({ type: "env_opened" });
    // Closing one makes room.
    client.send({ type: "env_close", id: "a" });
    client.send({ type: "env_open", id: "d", tag: "Bandit", groups: 1, group_size: 1 });
    expect(await client.next((f) => f.type === "env_opened" && f.id === "d")).toBeTruthy();
    client.close();
    other.close();
  });

  it("refuses a step past max_held_bytes_per_connection and changes nothing", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "s", tag: "SimpleSokoban", groups: 1, group_size: 2, max_turn: 5 });
    await client.next((f) => f.type === "env_opened");
    const long = `${"x".repeat(6000)}</think><answer>Up</answer>`;
    let from = client.received.length;
    client.send({ type: "env_step", id: "s", responses: [{ env_id: 0, text: long }] });
    expect(await arrivedAfter(client, from, "env_stepped", "s")).toBeTruthy();
    from = client.received.length;
    client.send({ type: "env_step", id: "s", responses: [{ env_id: 1, text: long }] });
    const refused = await arrivedAfter(client, from, "error", "s");
    expect(refused).toMatchObject({ code: "limit", field: "responses" });
    expect(refused.message).toMatch(
      /max_held_bytes_per_connection is 16000; this session holds 10\d{3} bytes/,
    );
    // Nothing was applied: episode 1 still takes its first turn, and the record shows one turn for 0.
    from = client.received.length;
    client.send({
      type: "env_step",
      id: "s",
      responses: [{ env_id: 1, text: "</think><answer>Up</answer>" }],
    });
    expect(await arrivedAfter(client, from, "env_stepped", "s")).toBeTruthy();
    client.send({ type: "env_close", id: "s" });
    const closed = await client.next((f) => f.type === "env_closed");
    const turns = (closed.episodes as { turns: unknown[] }[]).map((e) => e.turns.length);
    expect(turns).toEqual([1, 1]);
    client.close();
  });

  it("counts a step's bytes when it is accepted, so steps sent back to back cannot overshoot", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "q", tag: "SimpleSokoban", groups: 1, group_size: 3, max_turn: 5 });
    await client.next((f) => f.type === "env_opened" && f.id === "q");
    const long = `${"x".repeat(4000)}</think><answer>Up</answer>`;
    // Three steps in one TCP write: the server checks each before the one ahead of it has run.
    const from = client.received.length;
    const socket = (client.ws as unknown as { _socket: import("node:net").Socket })._socket;
    socket.cork();
    for (const env_id of [0, 1, 2])
      client.send({ type: "env_step", id: "q", responses: [{ env_id, text: long }] });
    socket.uncork();
    const refused = await arrivedAfter(client, from, "error", "q");
    expect(refused).toMatchObject({ code: "limit", field: "responses" });
    // 3 episodes (6,144 bytes) and two steps of 4,539 held: the third would pass 16,000.
    expect(refused.message).toMatch(/holds 15222 bytes .* and this step needs 4539/);
    // A refused step holds nothing: once the session is closed, the bytes are free again.
    client.send({ type: "env_close", id: "q" });
    const closed = await client.next((f) => f.type === "env_closed" && f.id === "q");
    expect((closed.episodes as { turns: unknown[] }[]).map((e) => e.turns.length)).toEqual([1, 1, 0]);
    client.close();
  });

  it("sends only the messages added since the previous turn by default; `full` sends the chat", async () => {
    // Turns of four episodes in two sessions: more than the 16,000 bytes of the server above.
    const roomy = await buildServer();
    const client = await TestClient.connect(await roomy.listen(0));
    const open = { tag: "SimpleSokoban", groups: 2, group_size: 2, seed: 77, max_turn: 8 };
    client.send({ type: "env_open", id: "new", ...open });
    client.send({ type: "env_open", id: "full", ...open, messages: "full" });
    const opened = await client.next((f) => f.type === "env_opened" && f.id === "new");
    await client.next((f) => f.type === "env_opened" && f.id === "full");
    const chats = new Map<number, Chat>(
      (opened.episodes as { env_id: number; messages: Chat }[]).map((e) => [e.env_id, e.messages]),
    );
    const moves = ["Up", "Left", "Down", "Right"];
    const sizes: number[] = [];
    for (let turn = 0; chats.size > 0 && turn < 8; turn++) {
      const responses = [...chats.keys()].map((env_id) => ({
        env_id,
        text: `turn ${turn} of ${env_id}</think><answer>${moves[(turn + env_id) % 4]}</answer>`,
      }));
      const from = client.received.length;
      client.send({ type: "env_step", id: "new", responses });
      client.send({ type: "env_step", id: "full", responses });
      const delta = await arrivedAfter(client, from, "env_stepped", "new");
      const full = await arrivedAfter(client, from, "env_stepped", "full");
      type Result = { env_id: number; messages: Chat | null; keep?: number; done: boolean };
      const fullById = new Map((full.results as Result[]).map((r) => [r.env_id, r]));
      for (const r of delta.results as Result[]) {
        const whole = fullById.get(r.env_id)!;
        expect(whole.keep).toBeUndefined();
        if (r.done) {
          expect(r.messages).toBeNull();
          chats.delete(r.env_id);
          continue;
        }
        // The previous chat's first `keep` messages, then the new ones, make the full chat.
        const rebuilt = [...chats.get(r.env_id)!.slice(0, r.keep), ...r.messages!];
        expect(rebuilt).toEqual(whole.messages);
        chats.set(r.env_id, rebuilt);
        // In the full context window a turn adds its answer and the next user message only.
        expect(r.messages!.length).toBeLessThanOrEqual(2);
      }
      sizes.push(encodeMessage(delta).byteLength);
    }
    expect(sizes.length).toBeGreaterThan(2);
    client.close();
    await roomy.shutdown();
  });

  it("counts hosted episodes against the session's share", async () => {
    const small = await buildServer({ maxEpisodesPerConnection: 8 });
    const smallUrl = await small.listen(0);
    try {
      const client = await TestClient.connect(smallUrl);
      client.send({ type: "env_open", id: "a", tag: "Bandit", groups: 2, group_size: 4 });
      await client.next((f) => f.type === "env_opened");
      client.send({ type: "env_open", id: "b", tag: "Bandit", groups: 1, group_size: 1 });
      const refused = await client.next((f) => f.type === "error" && f.id === "b");
      expect(refused.message).toMatch(/max_episodes_per_connection is 8; this session holds 8/);
      client.close();
      await client.closed();
      // The connection's end gives the episodes back.
      while (small.state.episodesInFlight !== 0) await new Promise((r) => setTimeout(r, 5));
    } finally {
      await small.shutdown();
    }
  });
});

describe("a large env_open", () => {
  it("is built in slices: another client's env_open and /healthz are answered meanwhile", async () => {
    // The order in which the server sends its replies, read from its one send path.
    const sent: string[] = [];
    const send = Outbound.prototype.send;
    Outbound.prototype.send = function (this: Outbound, frame: object) {
      const f = frame as { type: string; id?: string };
      sent.push(`${f.type}:${f.id ?? ""}`);
      return send.call(this, frame);
    };
    // 8,192 episodes hold 16 MiB: a server with the default memory budget.
    const server = await buildServer();
    const url = await server.listen(0);
    try {
      const client = await TestClient.connect(url);
      const other = await TestClient.connect(url);
      const before = server.state.episodesInFlight;
      client.send({ type: "env_open", id: "big", tag: "SimpleSokoban", groups: 64, group_size: 128 });
      // Its 8,192 episodes are held as soon as it is accepted; the build follows.
      while (server.state.episodesInFlight < before + 8192) await new Promise((r) => setTimeout(r, 1));
      other.send({ type: "env_open", id: "small", tag: "Bandit", groups: 1, group_size: 1 });
      expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ status: "ok" });
      await other.next((f) => f.type === "env_opened");
      const big = await client.next((f) => f.type === "env_opened", 120_000);
      expect(big.episodes as unknown[]).toHaveLength(8192);
      expect(sent.indexOf("env_opened:small")).toBeLessThan(sent.indexOf("env_opened:big"));
      client.close();
      other.close();
    } finally {
      Outbound.prototype.send = send;
      await server.shutdown();
    }
  }, 120_000);
});

describe("env hosting memory over the whole server", () => {
  let small: RollgymServer;
  let smallUrl: string;
  beforeAll(async () => {
    small = await buildServer({ maxEnvBytes: 12_000 });
    smallUrl = await small.listen(0);
  });
  afterAll(async () => {
    await small.shutdown();
  });

  it("refuses a step past the memory budget (max_env_bytes, its earlier name) whichever connection holds the bytes, until they are released", async () => {
    const a = await TestClient.connect(smallUrl);
    const b = await TestClient.connect(smallUrl);
    expect((a.of("welcome")[0].limits as Record<string, number>).max_env_bytes).toBe(12_000);
    for (const c of [a, b]) {
      c.send({ type: "env_open", id: "s", tag: "SimpleSokoban", groups: 1, group_size: 1, max_turn: 5 });
      await c.next((f) => f.type === "env_opened");
    }
    const long = `${"x".repeat(6000)}</think><answer>Up</answer>`;
    a.send({ type: "env_step", id: "s", responses: [{ env_id: 0, text: long }] });
    await a.next((f) => f.type === "env_stepped");
    let from = b.received.length;
    b.send({ type: "env_step", id: "s", responses: [{ env_id: 0, text: long }] });
    const refused = await arrivedAfter(b, from, "error", "s");
    expect(refused).toMatchObject({ code: "limit", field: "responses" });
    // Two episodes (4,096 bytes) and a's step of 6,539.
    expect(refused.message).toMatch(
      /max_held_bytes is 12000; 10635 bytes are held over all sessions \(rollouts in flight 0, groups held for acknowledgement 0, env sessions 10635\)/,
    );
    // a's session closes: its bytes are free for b.
    a.send({ type: "env_close", id: "s" });
    await a.next((f) => f.type === "env_closed");
    from = b.received.length;
    b.send({ type: "env_step", id: "s", responses: [{ env_id: 0, text: long }] });
    expect(await arrivedAfter(b, from, "env_stepped", "s")).toBeTruthy();
    // And a dropped connection frees its bytes too.
    b.ws.terminate();
    await expect.poll(() => small.state.memory.held, { timeout: 10_000 }).toBe(0);
    a.close();
  });

  it("charges steps with an empty text (each stores a turn record and a chat message)", async () => {
    const c = await TestClient.connect(smallUrl);
    c.send({ type: "env_open", id: "e", tag: "SimpleSokoban", groups: 1, group_size: 1, max_turn: 100 });
    await c.next((f) => f.type === "env_opened");
    let refused: Frame | null = null;
    let steps = 0;
    for (; steps < 40 && !refused; steps++) {
      const from = c.received.length;
      c.send({ type: "env_step", id: "e", responses: [{ env_id: 0, text: "" }] });
      const r = await c.next(
        (f) => (f.type === "env_stepped" || f.type === "error") && c.received.indexOf(f) >= from,
      );
      if (r.type === "error") refused = r;
    }
    expect(refused).toMatchObject({ code: "limit" });
    expect(steps).toBe(20); // 19 × 512 bytes fit in 12,000 beside the episode's 2,048
    c.close();
  });

  it("applies a step of thousands of responses in slices, the event loop turning between them", async () => {
    const roomy = await buildServer();
    const roomyUrl = await roomy.listen(0);
    const c = await TestClient.connect(roomyUrl);
    c.send({ type: "env_open", id: "big", tag: "Bandit", groups: 1024, group_size: 16 });
    const opened = await c.next((f) => f.type === "env_opened" && f.id === "big", 60_000);
    const ids = (opened.episodes as { env_id: number }[]).map((e) => e.env_id);
    // Count the event loop's turns while the step is applied: one per slice at least.
    let turns = 0;
    let ticking = true;
    const tick = () => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const at: number[] = [];
    const proto = HostedEnvs.prototype as unknown as { apply: (...args: unknown[]) => unknown };
    const apply = proto.apply;
    proto.apply = function (this: unknown, ...args: unknown[]) {
      at.push(turns);
      return apply.apply(this, args);
    };
    try {
      c.send({
        type: "env_step",
        id: "big",
        responses: ids.map((env_id) => ({ env_id, text: "</think><answer>Left</answer>" })),
      });
      const stepped = await c.next((f) => f.type === "env_stepped" && f.id === "big", 60_000);
      expect((stepped.results as unknown[]).length).toBe(16_384);
    } finally {
      proto.apply = apply;
      ticking = false;
    }
    expect(at).toHaveLength(16_384);
    expect(at[at.length - 1] - at[0]).toBeGreaterThanOrEqual(16_384 / OPEN_SLICE_EPISODES - 1);
    c.close();
    await roomy.shutdown();
  });
});
