// A fixed conversation with the server — rollouts in both deliveries, errors, env hosting,
// watching, a refused handshake — compared byte for byte with a transcript recorded before the
// edge was restructured (issue #21: behaviour unchanged). Re-record only for a change that is
// meant and listed: RECORD_TRANSCRIPT=1 npx vitest run test/server/transcript.test.ts
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeFrame } from "../../protocol/codec.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { type MockEngine, startMockEngine } from "../../src/mock-engine/server.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { type Frame, rolloutFrame, TestClient, until } from "../helpers/ws-client.ts";

const FIXTURE = new URL("../fixtures/transcript/conversation.json", import.meta.url);
const ENGINE_FIXTURE = new URL("../fixtures/transcript/engine-conversation.json", import.meta.url);

interface Entry {
  /** Which client received it. */
  client: string;
  /** The frame's type, for a readable diff. */
  type: string;
  /** The frame's bytes, session ids replaced, base64. */
  bytes: string;
}

let server: RollgymServer;
let url: string;
let engine: MockEngine;
let policy: ChatPolicy;
let engineServer: RollgymServer;
let engineUrl: string;

beforeAll(async () => {
  // One group at a time, so group frames come in one order on every run.
  server = await buildServer({ groupConcurrency: 1, maxGroupsPerRollout: 8 });
  url = await server.listen(0, "127.0.0.1");
  engine = await startMockEngine({ model: "mock", seed: 9 });
  policy = new ChatPolicy({ baseURL: engine.url, model: "mock" });
  await policy.preflight();
  engineServer = await buildServer({ policy, groupConcurrency: 1 });
  engineUrl = await engineServer.listen(0, "127.0.0.1");
});
afterAll(async () => {
  await server?.shutdown();
  await engineServer?.shutdown();
  await policy?.close();
  await engine?.close();
});

/** Session ids are random: each is replaced by a run of "S" of its length, bytes included. */
function withoutSessions(raw: Buffer, sessions: string[]): Buffer {
  let out = raw;
  for (const id of sessions) {
    const needle = Buffer.from(id);
    const mask = Buffer.alloc(needle.length, "S");
    for (let at = out.indexOf(needle); at >= 0; at = out.indexOf(needle, at + 1)) {
      out = Buffer.concat([out.subarray(0, at), mask, out.subarray(at + needle.length)]);
    }
  }
  return out;
}

/** A train rollout of one Bandit group of two, with `change` laid over it. */
function banditRollout(id: string, change: Record<string, unknown> = {}): Record<string, unknown> {
  return rolloutFrame(id, 1, 2, { tags: [{ tag: "Bandit", groups: 1 }], ...change });
}

/** The conversation; returns every frame each client received except `progress` (paced by time). */
async function converse(): Promise<{ entries: Entry[]; closes?: Record<string, number | null> }> {
  const trainer = await TestClient.connect(url, { hello: null });
  const watcher = await TestClient.connect(url);
  const sessions: string[] = [];
  const frameCount = (client: TestClient, type: string) => client.of(type).length;

  watcher.send({ type: "watch" });
  await watcher.next((f) => f.type === "watching");

  trainer.send({ type: "hello", protocol: 1, client: "transcript" });
  const welcome = await trainer.next((f) => f.type === "welcome");
  sessions.push(welcome.session as string, (watcher.of("welcome")[0] as Frame).session as string);

  // A batch rollout, acknowledged group by group.
  trainer.send({ type: "credit", groups: 100 });
  trainer.send({
    type: "rollout",
    id: "b1",
    tags: [
      { tag: "CoordSokoban", groups: 2 },
      { tag: "FrozenLake", groups: 1 },
    ],
    mode: "train",
    group_size: 3,
    seed: 42,
    delivery: "batch",
  });
  const b1 = await trainer.next((f) => f.type === "batch" && f.rollout === "b1");
  trainer.send({ type: "ack", rollout: "b1", groups: [...(b1.kept as number[])], batch: true });
  await watcher.next((f) => f.type === "watch_batch" && f.rollout === "b1");

  // A streamed val rollout with sampling and filter fields, left unacknowledged for a while.
  trainer.send({
    type: "rollout",
    id: "s1",
    tags: [{ tag: "Bandit", groups: 2 }],
    mode: "val",
    group_size: 4,
    sampling: { temperature: 0.7, max_tokens: 64 },
    filter: { strategy: "top_k", value: 1 },
    delivery: "stream",
  });
  const s1 = await trainer.next((f) => f.type === "batch" && f.rollout === "s1");
  // Its id is still taken: a duplicate is refused.
  trainer.send({
    type: "rollout",
    id: "s1",
    tags: [{ tag: "Bandit", groups: 1 }],
    mode: "val",
    group_size: 1,
    delivery: "batch",
  });
  await until(() => frameCount(trainer, "error") >= 1);
  trainer.send({ type: "ack", rollout: "s1", groups: [0, 1], batch: true });
  void s1;
  await watcher.next((f) => f.type === "watch_batch" && f.rollout === "s1");

  // Errors, each answered with an error frame on an open connection.
  const bad: Record<string, unknown>[] = [
    { type: "nonsense" },
    banditRollout("e1", { tags: [{ tag: "Nope", groups: 1 }] }),
    banditRollout("e2", { sampling: { temperature: "hot" } }),
    banditRollout("e3", { tags: [{ tag: "Bandit", groups: 9 }] }),
    banditRollout("e4", { mode: "sideways" }),
    banditRollout(""),
    banditRollout("e5", { group_size: 0 }),
    banditRollout("e6", { filter: { strategy: "median" } }),
    { type: "cancel", rollout: "ghost" },
    { type: "ack", rollout: "b1", groups: [7] },
    { type: "credit", groups: 0 },
    { type: "env_step", id: "ghost", responses: [] },
    { type: "env_close", id: "ghost" },
    { type: "hello", protocol: 1, client: "again" },
  ];
  const errorsBefore = frameCount(trainer, "error");
  for (const frame of bad) trainer.send(frame);
  await until(() => frameCount(trainer, "error") >= errorsBefore + bad.length);

  // Env hosting: open, a step with a valid, a malformed and a done-later answer, close.
  trainer.send({ type: "env_open", id: "h1", tag: "Bandit", groups: 1, group_size: 2, seed: 7 });
  await trainer.next((f) => f.type === "env_opened");
  trainer.send({
    type: "env_step",
    id: "h1",
    responses: [
      { env_id: 0, text: "pick</think><answer>Phoenix</answer>" },
      { env_id: 1, text: "no tags at all" },
    ],
  });
  await trainer.next((f) => f.type === "env_stepped");
  trainer.send({ type: "env_step", id: "h1", responses: [{ env_id: 0, text: "<answer>Dragon</answer>" }] });
  await until(() => frameCount(trainer, "env_stepped") >= 2);
  trainer.send({ type: "env_step", id: "h1", responses: [{ env_id: 5, text: "<answer>Dragon</answer>" }] });
  await until(() => frameCount(trainer, "error") >= errorsBefore + bad.length + 1);
  trainer.send({
    type: "env_open",
    id: "h2",
    tag: "SimpleSokoban",
    groups: 1,
    group_size: 1,
    seed: 3,
    messages: "full",
  });
  await trainer.next((f) => f.type === "env_opened" && f.id === "h2");
  trainer.send({
    type: "env_step",
    id: "h2",
    responses: [{ env_id: 0, text: "go</think><answer>Up || Left</answer>" }],
  });
  await trainer.next((f) => f.type === "env_stepped" && f.id === "h2");
  trainer.send({ type: "env_close", id: "h1" });
  trainer.send({ type: "env_close", id: "h2" });
  await until(() => frameCount(trainer, "env_closed") >= 2);

  watcher.send({ type: "unwatch" });

  // A rollout left unacknowledged, its connection dropped, the session resumed: sent again.
  const leaver = await TestClient.connect(url, { hello: { type: "hello", protocol: 1, client: "leaver" } });
  const leaverSession = (leaver.of("welcome")[0] as Frame).session as string;
  sessions.push(leaverSession);
  leaver.send({ type: "credit", groups: 10 });
  leaver.send({
    type: "rollout",
    id: "r1",
    tags: [{ tag: "SimpleSokoban", groups: 2 }],
    mode: "val",
    group_size: 2,
    delivery: "batch",
  });
  await leaver.next((f) => f.type === "batch");
  leaver.ws.terminate();
  await leaver.closed();
  const returner = await TestClient.connect(url, {
    hello: { type: "hello", protocol: 1, client: "leaver", resume: leaverSession },
  });
  returner.send({ type: "credit", groups: 10 });
  await returner.next((f) => f.type === "batch");
  returner.send({ type: "ack", rollout: "r1", groups: [0, 1], batch: true });
  returner.ws.close(1000);
  await returner.closed();

  // A handshake in another protocol version: refused and closed.
  const stranger = await TestClient.connect(url, { hello: null });
  stranger.send({ type: "hello", protocol: 2, client: "future" });
  await stranger.closed();

  trainer.ws.close(1000);
  watcher.ws.close(1000);
  await Promise.all([trainer.closed(), watcher.closed()]);

  const clients: [string, TestClient][] = [
    ["trainer", trainer],
    ["watcher", watcher],
    ["leaver", leaver],
    ["returner", returner],
    ["stranger", stranger],
  ];
  return { entries: entriesOf(clients, sessions), closes: { stranger: stranger.closeCode } };
}

/** Every frame a client received except `progress`, session ids replaced. */
function entriesOf(clients: [string, TestClient][], sessions: string[]): Entry[] {
  const entries: Entry[] = [];
  for (const [name, client] of clients) {
    client.raw.forEach((raw, i) => {
      const frame = client.received[i] as Frame;
      if (frame.type === "progress") return;
      entries.push({
        client: name,
        type: frame.type,
        bytes: withoutSessions(raw, sessions).toString("base64"),
      });
    });
  }
  return entries;
}

/** Against the mock engine: a chat-mode and a token-mode rollout, and a token env session. */
async function converseWithEngine(): Promise<{ entries: Entry[] }> {
  const trainer = await TestClient.connect(engineUrl);
  const session = (trainer.of("welcome")[0] as Frame).session as string;
  trainer.send({ type: "credit", groups: 100 });
  for (const [id, tokens] of [
    ["chat", false],
    ["tokens", true],
  ] as const) {
    trainer.send({
      type: "rollout",
      id,
      tags: [{ tag: "SimpleSokoban", groups: 2 }],
      mode: "train",
      group_size: 2,
      seed: 10000,
      max_turn: 2,
      tokens,
      sampling: { temperature: 1, max_tokens: 96 },
      delivery: "batch",
    });
    const batch = await trainer.next((f) => f.type === "batch" && f.rollout === id);
    trainer.send({ type: "ack", rollout: id, groups: [...(batch.kept as number[])], batch: true });
  }
  trainer.send({
    type: "env_open",
    id: "t1",
    tag: "SimpleSokoban",
    groups: 1,
    group_size: 1,
    seed: 5,
    tokens: true,
  });
  const opened = await trainer.next((f) => f.type === "env_opened");
  const prompt = ((opened.episodes as Frame[])[0] as Frame).prompt_ids as number[];
  trainer.send({
    type: "env_step",
    id: "t1",
    responses: [{ env_id: 0, text: "go</think><answer>Up</answer>", sampled_ids: prompt.slice(-3) }],
  });
  await trainer.next((f) => f.type === "env_stepped" || f.type === "error");
  trainer.send({ type: "env_close", id: "t1" });
  await trainer.next((f) => f.type === "env_closed");
  trainer.ws.close(1000);
  await trainer.closed();
  return { entries: entriesOf([["trainer", trainer]], [session]) };
}

function compareWith(fixture: URL, now: { entries: Entry[] }): void {
  if (process.env.RECORD_TRANSCRIPT === "1" || !existsSync(fixture)) {
    writeFileSync(fixture, `${JSON.stringify(now, null, 1)}\n`);
  }
  const recorded = JSON.parse(readFileSync(fixture, "utf8")) as typeof now;
  const readable = (entries: Entry[]) =>
    entries.map((e) => ({ client: e.client, frame: decodeFrame(Buffer.from(e.bytes, "base64")) }));
  // A readable difference first, then the bytes themselves.
  expect(readable(now.entries)).toEqual(readable(recorded.entries));
  expect(now).toEqual(recorded);
}

describe("the server's frames, byte for byte", () => {
  it("match the transcript recorded before the edge was restructured", async () => {
    compareWith(FIXTURE, await converse());
  });

  it("against an engine, in chat and token mode, match theirs too", async () => {
    compareWith(ENGINE_FIXTURE, await converseWithEngine());
  });
});
