// The attack bench's clients: src/client's protocol client recording every frame (it can
// stop reading: the kernel's buffers fill, then the server's), raw sockets, and the
// well-behaved client whose rollouts must keep completing during every attack.
import { type Socket, connect as tcpConnect } from "node:net";
import { NodeClient } from "../../src/client/node.ts";
import { type Frame, helloFrame } from "../../src/client/protocol-client.ts";

export type Client = NodeClient;

/** Opens a recording client and, unless `hello` is null, says hello and waits for the answer. */
export async function open(
  url: string,
  hello: Frame | null,
  options: { token?: string; localAddress?: string } = {},
): Promise<Client> {
  return (await NodeClient.connect(url, hello, { ...options, record: true })).client;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A raw TCP socket to the server (for half-sent upgrades and silent connections). */
export function rawSocket(url: string, localAddress?: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = tcpConnect({ host: hostname, port: Number(port), localAddress }, () => resolve(s));
    s.once("error", reject);
  });
}

/** Connects and says hello as `name`; socket errors (the server closing on us) are expected here. */
export async function connect(url: string, name = "attack", token?: string): Promise<Client> {
  const client = await open(url, helloFrame(name), { token });
  client.ws.on("error", () => {});
  return client;
}

/** Connects without saying hello. */
export async function connectSilent(url: string, token?: string): Promise<Client> {
  const client = await open(url, null, { token });
  client.ws.on("error", () => {});
  return client;
}

export interface GoodRolloutShape {
  groups: number;
  groupSize: number;
  delivery: "stream" | "batch";
  tag?: string;
  seed?: number;
}

/**
 * The well-behaved client: one rollout with the server's built-in policy, credit one group at a
 * time and an ack for each; checks every group arrived exactly once (stream: all of them; batch:
 * the kept ones the verdict names) and the verdict came. Throws with what went wrong.
 */
export async function goodRollout(
  url: string,
  id: string,
  timeoutMs: number,
  shape: GoodRolloutShape = { groups: 2, groupSize: 2, delivery: "batch" },
  token?: string,
): Promise<void> {
  const c = await connect(url, "good", token);
  try {
    await playRollout(c, id, timeoutMs, shape);
  } finally {
    c.close();
  }
}

/** A rollout the server refused (its error frame's code and message). */
export class RolloutRefused extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(`refused: ${code} ${message}`);
    this.code = code;
  }
}

/** How a trainer paces itself (the soak's slow trainers credit one group at a time, late). */
export interface Pacing {
  /** Credit sent with the rollout (default 4); each acknowledged group gives one more. */
  credit?: number;
  /** Awaited before each group's ack. */
  beforeAck?: () => Promise<void>;
  /** Run once the rollout is sent, beside the wait for its verdict (e.g. stop reading a while). */
  meanwhile?: () => Promise<void>;
}

/**
 * One rollout on an open connection (see goodRollout); resolves to the number of groups
 * delivered. Throws RolloutRefused when the server refuses it, or an Error naming what went wrong.
 */
export async function playRollout(
  c: Client,
  id: string,
  timeoutMs: number,
  shape: GoodRolloutShape,
  pacing: Pacing = {},
): Promise<number> {
  const seen = new Map<number, number>();
  const onMessage = async () => {
    const f = c.received.at(-1)!;
    if (f.type !== "group" || f.rollout !== id) return;
    const g = f.group as number;
    seen.set(g, (seen.get(g) ?? 0) + 1);
    await pacing.beforeAck?.();
    c.send({ type: "ack", rollout: id, groups: [g] });
    c.send({ type: "credit", groups: 1 });
  };
  c.ws.on("message", onMessage);
  try {
    c.send({ type: "credit", groups: pacing.credit ?? 4 });
    c.send({
      type: "rollout",
      id,
      tags: [{ tag: shape.tag ?? "SimpleSokoban", groups: shape.groups }],
      mode: "train",
      group_size: shape.groupSize,
      seed: shape.seed ?? 7,
      delivery: shape.delivery,
    });
    await pacing.meanwhile?.();
    const end = await c.next(
      (f) => f.rollout === id && (f.type === "batch" || f.type === "error"),
      timeoutMs,
    );
    if (end.type === "error") throw new RolloutRefused(String(end.code), String(end.message));
    if (end.failed !== 0) throw new Error(`${end.failed} failed episodes`);
    const expected =
      shape.delivery === "stream"
        ? Array.from({ length: shape.groups }, (_, i) => i)
        : (end.kept as number[]);
    const missing = expected.filter((g) => !seen.has(g));
    const twice = [...seen].filter(([, n]) => n > 1).map(([g]) => g);
    if (missing.length || twice.length || seen.size !== expected.length)
      throw new Error(`groups missing ${missing.join(",") || "none"}, twice ${twice.join(",") || "none"}`);
    c.send({ type: "ack", rollout: id, groups: [], batch: true });
    return seen.size;
  } finally {
    c.ws.off("message", onMessage);
  }
}
