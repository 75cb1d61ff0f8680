// A small protocol client for the attack benchmark: raw frames in, decoded messages out, and a
// way to stop reading (the kernel's buffers fill, then the server's).
import type { Socket } from "node:net";
import WebSocket from "ws";
import { decodeFrame, encodeMessage } from "../../protocol/codec.ts";

export type Frame = Record<string, unknown> & { type: string };

export class Client {
  readonly ws: WebSocket;
  readonly frames: Frame[] = [];
  closeCode: number | null = null;
  private waiters: { match: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];

  private constructor(ws: WebSocket) {
    this.ws = ws;
    ws.on("message", (data: Buffer) => {
      const frame = decodeFrame(new Uint8Array(data)) as Frame;
      this.frames.push(frame);
      this.waiters = this.waiters.filter((w) => {
        if (!w.match(frame)) return true;
        w.resolve(frame);
        return false;
      });
    });
    ws.on("close", (code) => {
      this.closeCode = code;
    });
    ws.on("error", () => {});
  }

  static async connect(url: string, name = "attack"): Promise<Client> {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    const client = new Client(ws);
    client.send({ type: "hello", protocol: 1, client: name });
    await client.next((f) => f.type === "welcome" || f.type === "error");
    return client;
  }

  send(frame: Record<string, unknown>): void {
    this.ws.send(encodeMessage(frame));
  }

  next(match: (f: Frame) => boolean, timeoutMs = 30_000): Promise<Frame> {
    const seen = this.frames.find(match);
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

  of(type: string): Frame[] {
    return this.frames.filter((f) => f.type === type);
  }

  pause(): void {
    (this.ws as unknown as { _socket: Socket })._socket.pause();
  }

  close(): void {
    this.ws.terminate();
  }
}

/** The well-behaved client: a 2 × 2 batch rollout with the server's built-in policy. */
export async function goodRollout(url: string, id: string, timeoutMs: number): Promise<void> {
  const c = await Client.connect(url, "good");
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
