// A minimal protocol client for the server tests: raw frames in, decoded messages out.
import type { Socket } from "node:net";
import WebSocket from "ws";
import { decodeFrame, encodeMessage } from "../../protocol/codec.ts";

export type Frame = Record<string, unknown> & { type: string };

export class TestClient {
  readonly ws: WebSocket;
  readonly received: Frame[] = [];
  /** Every frame's bytes as they arrived (for byte-for-byte comparisons). */
  readonly raw: Buffer[] = [];
  closeCode: number | null = null;
  closeReason = "";
  private waiters: { match: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];
  private closeWaiters: (() => void)[] = [];

  private constructor(ws: WebSocket) {
    this.ws = ws;
    ws.on("message", (data: Buffer) => {
      this.raw.push(Buffer.from(data));
      const frame = decodeFrame(new Uint8Array(data)) as Frame;
      this.received.push(frame);
      this.waiters = this.waiters.filter((w) => {
        if (!w.match(frame)) return true;
        w.resolve(frame);
        return false;
      });
    });
    ws.on("close", (code, reason) => {
      this.closeCode = code;
      this.closeReason = reason.toString();
      for (const w of this.closeWaiters.splice(0)) w();
    });
  }

  static async connect(
    url: string,
    options: { token?: string; queryToken?: string; hello?: Frame | null; localAddress?: string } = {},
  ): Promise<TestClient> {
    const headers = options.token ? { authorization: `Bearer ${options.token}` } : undefined;
    const query = options.queryToken ? `?token=${encodeURIComponent(options.queryToken)}` : "";
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts${query}`, {
      headers,
      // Another loopback address (127.0.0.2, …) is another remote address to the server.
      localAddress: options.localAddress,
    });
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
      ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    const client = new TestClient(ws);
    if (options.hello !== null) {
      client.send(options.hello ?? { type: "hello", protocol: 1, client: "test" });
      await client.next((f) => f.type === "welcome" || f.type === "error");
    }
    return client;
  }

  send(frame: Record<string, unknown>): void {
    this.ws.send(encodeMessage(frame));
  }

  /** The first frame (already received or future) matching `match`. */
  next(match: (f: Frame) => boolean, timeoutMs = 60_000): Promise<Frame> {
    const seen = this.received.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("timed out waiting for a frame")), timeoutMs);
      this.waiters.push({
        match,
        resolve: (f) => {
          clearTimeout(timer);
          resolve(f);
        },
      });
    });
  }

  closed(): Promise<void> {
    if (this.closeCode !== null) return Promise.resolve();
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  of(type: string): Frame[] {
    return this.received.filter((f) => f.type === type);
  }

  close(): void {
    this.ws.close();
  }
}

/** Stops reading the socket: the kernel's buffers fill, then the server's (a client that never reads). */
export function pauseReading(client: TestClient): void {
  (client.ws as unknown as { _socket: Socket })._socket.pause();
}

export function resumeReading(client: TestClient): void {
  (client.ws as unknown as { _socket: Socket })._socket.resume();
}

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
