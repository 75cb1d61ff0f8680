// The attack benchmark's clients: the tests' protocol client (test/helpers/ws-client.ts), plus
// a way to stop reading (the kernel's buffers fill, then the server's).
import { pauseReading, TestClient } from "../../test/helpers/ws-client.ts";

export { pauseReading };

export type Client = TestClient;

/** Connects and says hello as `name`; socket errors (the server closing on us) are expected here. */
export async function connect(url: string, name = "attack"): Promise<Client> {
  const client = await TestClient.connect(url, { hello: { type: "hello", protocol: 1, client: name } });
  client.ws.on("error", () => {});
  return client;
}

/** The well-behaved client: a 2 × 2 batch rollout with the server's built-in policy. */
export async function goodRollout(url: string, id: string, timeoutMs: number): Promise<void> {
  const c = await connect(url, "good");
  try {
    c.send({ type: "credit", groups: 100 });
    c.send({
      type: "rollout",
      id,
      tags: [{ tag: "SimpleSokoban", groups: 2 }],
      mode: "train",
      group_size: 2,
      seed: 7,
      delivery: "batch",
    });
    const end = await c.next(
      (f) => f.rollout === id && (f.type === "batch" || f.type === "error"),
      timeoutMs,
    );
    if (end.type === "error") throw new Error(`good rollout refused: ${end.code} ${end.message}`);
    if (end.failed !== 0) throw new Error(`good rollout had ${end.failed} failed episodes`);
    if (c.of("group").length !== 2) throw new Error(`good rollout got ${c.of("group").length} groups`);
    c.send({ type: "ack", rollout: id, groups: [], batch: true });
  } finally {
    c.close();
  }
}
