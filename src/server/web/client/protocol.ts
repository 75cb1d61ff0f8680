/// <reference lib="dom" />
// The page speaks the trainers' protocol (PROTOCOL.md): binary msgpack frames over the same
// WebSocket, the same hello, the same token (as `?token=`, which browsers can send).
import { decode, encode } from "@msgpack/msgpack";
import { token } from "./api.ts";

export type Frame = { type: string } & Record<string, unknown>;

export class Connection {
  private readonly socket: WebSocket;
  onFrame: (frame: Frame) => void = () => {};
  onClose: (code: number, reason: string) => void = () => {};

  private constructor(socket: WebSocket) {
    this.socket = socket;
    socket.addEventListener("message", (event) => {
      this.onFrame(decode(new Uint8Array(event.data as ArrayBuffer)) as Frame);
    });
    socket.addEventListener("close", (event) => this.onClose(event.code, event.reason));
  }

  /** Open a connection and complete the handshake. */
  static open(): Promise<Connection> {
    const t = token();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(
      `${scheme}://${location.host}/v1/rollouts${t ? `?token=${encodeURIComponent(t)}` : ""}`,
    );
    socket.binaryType = "arraybuffer";
    const connection = new Connection(socket);
    return new Promise((resolve, reject) => {
      socket.addEventListener("open", () =>
        connection.send({ type: "hello", protocol: 1, client: "rollgym-web" }),
      );
      socket.addEventListener("error", () => reject(new Error("cannot connect to the server's WebSocket")));
      connection.onFrame = (frame) => {
        if (frame.type === "welcome") resolve(connection);
        else reject(new Error(String(frame.message ?? frame.type)));
      };
    });
  }

  send(frame: Frame): void {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(encode(frame));
  }

  close(): void {
    this.socket.close(1000);
  }
}
