/// <reference lib="dom" />
// The page speaks the trainers' protocol (PROTOCOL.md) through the same client as the bench and
// the tests (src/client/protocol-client.ts), over the browser's WebSocket, with the same hello
// and the same token (as `?token=`, which browsers can send).
import { type Frame, helloFrame, ProtocolClient } from "../../../client/protocol-client.ts";
import { token } from "./api.ts";

export type { Frame };

export class Connection {
  private readonly client: ProtocolClient<WebSocket>;
  onFrame: (frame: Frame) => void = () => {};
  onClose: (code: number, reason: string) => void = () => {};

  private constructor(client: ProtocolClient<WebSocket>) {
    this.client = client;
    client.onFrame((frame) => this.onFrame(frame));
    client.onClose((code, reason) => this.onClose(code, reason));
  }

  /** Open a connection and complete the handshake. */
  static async open(): Promise<Connection> {
    const t = token();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(
      `${scheme}://${location.host}/v1/rollouts${t ? `?token=${encodeURIComponent(t)}` : ""}`,
    );
    socket.binaryType = "arraybuffer";
    const connection = new Connection(new ProtocolClient(socket));
    await new Promise((resolve, reject) => {
      socket.addEventListener("open", resolve);
      socket.addEventListener("error", () => reject(new Error("cannot connect to the server's WebSocket")));
    });
    const answer = await connection.client.hello(helloFrame("rollgym-web"));
    if (answer.type !== "welcome") throw new Error(String(answer.message ?? answer.type));
    return connection;
  }

  send(frame: Frame): void {
    this.client.send(frame);
  }

  close(): void {
    this.client.close(1000);
  }
}
