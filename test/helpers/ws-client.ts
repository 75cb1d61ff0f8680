// The tests' protocol client: src/client's, connected with the tests' hello and recording every
// frame, plus waits and rollouts the tests share.
import { type ConnectOptions, NodeClient } from "../../src/client/node.ts";
import { type Frame, helloFrame } from "../../src/client/protocol-client.ts";

export type { Frame };

/** A recording client (`received`, `raw`); `next` waits a minute by default. */
export type TestClient = NodeClient;

export const TestClient = {
  /** Connects and says hello (`hello`, default the tests' own; null: none), recording every frame. */
  async connect(
    url: string,
    options: Omit<ConnectOptions, "record"> & { hello?: Frame | null } = {},
  ): Promise<TestClient> {
    const { hello = helloFrame("test"), ...rest } = options;
    const { client } = await NodeClient.connect(url, hello, { ...rest, record: true });
    return client;
  },
};

/** Waits until `check` holds, looking between event-loop turns (never a timing assertion). */
export async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** A train-mode SimpleSokoban rollout frame (batch delivery unless `extra` says otherwise). */
export function rolloutFrame(
  id: string,
  groups: number,
  groupSize: number,
  extra: Record<string, unknown> = {},
): Frame {
  return {
    type: "rollout",
    id,
    tags: [{ tag: "SimpleSokoban", groups }],
    mode: "train",
    group_size: groupSize,
    delivery: "batch",
    ...extra,
  };
}

/**
 * Sends `rollout` with ample credit, acknowledges each of its groups as it arrives, and resolves
 * to its verdict (the batch frame, or the error refusing it) after acknowledging the batch, so
 * the session holds nothing of it afterwards.
 */
export async function playToVerdict(client: TestClient, rollout: Frame): Promise<Frame> {
  const id = rollout.id;
  const from = client.received.length;
  const ack = () => {
    const f = client.received.at(-1)!;
    if (f.type === "group" && f.rollout === id) client.send({ type: "ack", rollout: id, groups: [f.group] });
  };
  client.ws.on("message", ack);
  client.send({ type: "credit", groups: 1000 });
  client.send(rollout);
  try {
    const verdict = await client.next(
      (f) =>
        f.rollout === id && (f.type === "batch" || f.type === "error") && client.received.indexOf(f) >= from,
    );
    client.send({ type: "ack", rollout: id, groups: [], batch: true });
    return verdict;
  } finally {
    client.ws.off("message", ack);
  }
}

/** A stream rollout whose client never acknowledges: it stalls at the buffer bound. */
export async function stalledRollout(client: TestClient, id = "last"): Promise<void> {
  client.send({
    type: "rollout",
    id,
    tags: [{ tag: "SimpleSokoban", groups: 1000 }],
    mode: "train",
    group_size: 4,
    delivery: "stream",
  });
  client.send({ type: "credit", groups: 10 });
  await client.next((f) => f.type === "group");
}
