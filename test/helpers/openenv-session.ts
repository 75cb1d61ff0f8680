// One OpenEnv session on rollgym's /openenv/TAG/ws, as the tests drive it: JSON text out, answers
// in order, the close recorded.
import WebSocket from "ws";

export type Answer = { type: string; data: Record<string, unknown> };

export class OpenEnvTestSession {
  readonly ws: WebSocket;
  /** Answers not yet taken by next() or send(). */
  readonly answers: Answer[] = [];
  private waiting: ((a: Answer) => void)[] = [];
  closeCode: number | null = null;
  readonly closed: Promise<{ code: number; reason: string }>;

  /** `check` sees every answer as it arrives (e.g. against OpenEnv's shapes). */
  private constructor(ws: WebSocket, check: (answer: Answer, isBinary: boolean) => void) {
    this.ws = ws;
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      const answer = JSON.parse(data.toString("utf8")) as Answer;
      check(answer, isBinary);
      const wake = this.waiting.shift();
      if (wake) wake(answer);
      else this.answers.push(answer);
    });
    this.closed = new Promise((resolve) =>
      ws.once("close", (code, reason) => {
        this.closeCode = code;
        resolve({ code, reason: reason.toString() });
      }),
    );
  }

  /** Opens a session of `tag`; an HTTP refusal at the upgrade rejects naming its status. */
  static async open(
    url: string,
    tag: string,
    options: WebSocket.ClientOptions & { check?: (answer: Answer, isBinary: boolean) => void } = {},
  ): Promise<OpenEnvTestSession> {
    const { check = () => {}, ...wsOptions } = options;
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/openenv/${tag}/ws`, wsOptions);
    const session = new OpenEnvTestSession(ws, check);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("unexpected-response", (_q, r) => reject(new Error(`HTTP ${r.statusCode}`)));
      ws.once("error", reject);
    });
    return session;
  }

  /** The next answer (already arrived, or to come). */
  next(): Promise<Answer> {
    const ready = this.answers.shift();
    return ready ? Promise.resolve(ready) : new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Sends `message` (a string as it is, else as JSON) and waits for its answer. */
  async send(message: unknown): Promise<Answer> {
    this.ws.send(typeof message === "string" ? message : JSON.stringify(message));
    return this.next();
  }
}
