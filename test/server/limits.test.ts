// The server refuses what the CLI refuses, with the same checks (src/rollout/limits.ts): seeds
// that would pass 2^32 − 1 get bad_frame naming the bound (never wrapped, never `internal`),
// and env sessions are bounded like rollouts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { TestClient } from "../helpers/ws-client.ts";

let server: RollgymServer;
let url: string;
beforeAll(async () => {
  server = await buildServer();
  url = await server.listen(0);
});
afterAll(async () => {
  await server?.shutdown();
});

describe("rollout and env-session limits", () => {
  it("refuses seeds past 2^32 − 1 with bad_frame naming the bound, and keeps serving", async () => {
    const client = await TestClient.connect(url);
    // Credit first: a wrapped seed would be played and its groups sent.
    client.send({ type: "credit", groups: 10 });
    client.send({
      type: "rollout",
      id: "big",
      tags: [{ tag: "SimpleSokoban", groups: 8 }],
      mode: "train",
      group_size: 2,
      seed: 4294967295,
      delivery: "batch",
    });
    const error = await client.next((f) => f.type === "error" && f.rollout === "big");
    expect(error).toMatchObject({ code: "bad_frame", field: "seed" });
    expect(error.message).toMatch(/4294967295/);
    // The same connection still plays a valid rollout.
    client.send({
      type: "rollout",
      id: "ok",
      tags: [{ tag: "SimpleSokoban", groups: 1 }],
      mode: "train",
      group_size: 2,
      seed: 4294967295,
      delivery: "batch",
    });
    expect(await client.next((f) => f.type === "batch" && f.rollout === "ok")).toMatchObject({ failed: 0 });
    expect(client.of("group").filter((g) => g.rollout === "big")).toHaveLength(0);
    client.close();
  });

  it("bounds an env session like a rollout: 4096 × 4096 episodes get limit, not a frozen server", async () => {
    const client = await TestClient.connect(url);
    client.send({ type: "env_open", id: "huge", tag: "SimpleSokoban", groups: 4096, group_size: 4096 });
    const error = await client.next((f) => f.type === "error" && f.id === "huge");
    expect(error).toMatchObject({ code: "limit", field: "group_size" });
    expect(error.message).toMatch(/max_episodes_in_flight is 65536/);
    client.send({
      type: "env_open",
      id: "seed",
      tag: "SimpleSokoban",
      groups: 2,
      group_size: 1,
      seed: 4294967295,
    });
    expect(await client.next((f) => f.type === "error" && f.id === "seed")).toMatchObject({
      code: "bad_frame",
      field: "seed",
    });
    client.close();
  });
});
