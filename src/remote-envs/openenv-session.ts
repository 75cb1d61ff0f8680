// One OpenEnv session as a client holds it (docs/openenv.md): a WebSocket on BASE/ws, JSON
// requests answered one at a time. Everything that can go wrong on the wire ends as an
// OpenEnvFailure whose reason names it (the server closed or died, no answer in time, an answer
// that is not OpenEnv's, a full server), so an episode fails with that reason instead of hanging.
import WebSocket from "ws";
import { type ChargeBytes, EnvUsageError } from "../../envs/types.ts";
import { clip, JsonTooDeepError, parseJson, preview } from "../../protocol/bounded-json.ts";
import { checkAnswer } from "../../protocol/openenv.ts";
import { withoutSecrets } from "../../protocol/secret-urls.ts";

/** Why a remote episode could not go on; each starts the failure's message. */
export type OpenEnvReason =
  | "openenv_connect"
  | "openenv_closed"
  | "openenv_timeout"
  | "openenv_garbage"
  | "openenv_capacity"
  | "openenv_session_error"
  | "openenv_seed_ignored";

export class OpenEnvFailure extends Error {
  /** rollgym's error catalogue code (src/errors/catalogue.ts); remote-envs imports nothing of ours. */
  readonly code = "openenv_failed";
  readonly reason: OpenEnvReason;
  /** The message without its reason. */
  readonly detail: string;
  constructor(reason: OpenEnvReason, message: string) {
    super(`${reason}: ${message}`);
    this.name = "OpenEnvFailure";
    this.reason = reason;
    this.detail = message;
  }
}

/** A full server's CAPACITY_REACHED, with the session limit it reported (OpenEnv's max_sessions). */
export class OpenEnvCapacity extends OpenEnvFailure {
  readonly maxSessions: number | null;
  constructor(url: string, message: string, maxSessions: number | null) {
    super("openenv_capacity", `${url} answered CAPACITY_REACHED: ${message}`);
    this.maxSessions = maxSessions;
  }
}

/** How long rollgym waits for the server to close a session it let go before closing it itself. */
const SERVER_CLOSE_MS = 1_000;
/** How long a slot waits for a session rollgym let go to be closed before it is offered again. */
const CLOSE_WAIT_MS = 2_000;

/**
 * The server refused one request and the session goes on (EXECUTION_ERROR: the env raised, or
 * the episode is over; VALIDATION_ERROR: the action does not fit its model).
 */
export class OpenEnvRefused extends EnvUsageError {
  constructor(url: string, code: string, message: string) {
    super(`openenv_refused: ${code} from ${url}: ${message}`);
    this.name = "OpenEnvRefused";
  }
}

/** What OpenEnv's reset and step answer: `{observation, reward, done}`. */
export interface ObservationAnswer {
  observation: Record<string, unknown>;
  reward: number | null;
  done: boolean;
}

/** Error codes after which the server goes on with the session. */
const REQUEST_ERRORS = new Set(["EXECUTION_ERROR", "VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE"]);

/** How a session reads its server's answers. */
export interface SessionOptions {
  /** The largest answer taken (the tag's max_answer_bytes); a larger one fails the episode at its header. */
  maxAnswerBytes: number;
  /** Hears each answer's bytes before it is parsed (the episode's holder charges them). */
  charge?: ChargeBytes;
}

interface Pending {
  what: string;
  resolve: (answer: ObservationAnswer) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

export class OpenEnvSession {
  /** The session's URL as messages show it (withoutSecrets). */
  readonly url: string;
  private readonly ws: WebSocket;
  /** Settles once the socket has closed (at most CLOSE_WAIT_MS after close() is called). */
  private readonly socketClosed: Promise<void>;
  private pending: Pending | null = null;
  /** A frame that came before any request (a full server's CAPACITY_REACHED), answered to the next one. */
  private early: string | null = null;
  /** Why the socket is gone, once it is. */
  private gone: OpenEnvFailure | null = null;

  private constructor(url: string, ws: WebSocket, options: SessionOptions) {
    this.url = withoutSecrets(url);
    this.ws = ws;
    this.socketClosed = new Promise((resolve) => ws.once("close", () => resolve()));
    url = this.url;
    ws.on("message", (data, isBinary) => {
      options.charge?.(rawBytes(data));
      this.received(isBinary ? null : data.toString());
    });
    ws.on("close", (code, reason) => {
      const why = `${code}${reason.length ? ` ${reason.toString()}` : ""}`;
      this.lost(new OpenEnvFailure("openenv_closed", `${url} closed the session (${why})`));
    });
    ws.on("error", (error) =>
      this.lost(
        (error as { code?: string }).code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH"
          ? new OpenEnvFailure(
              "openenv_garbage",
              `${url} sent an answer of more than max_answer_bytes (${options.maxAnswerBytes} bytes)`,
            )
          : new OpenEnvFailure("openenv_closed", `${url}: ${error.message}`),
      ),
    );
  }

  /** Opens a session on `url` (ws://…/ws), or fails with openenv_connect within `timeoutMs`. */
  static connect(url: string, timeoutMs: number, options: SessionOptions): Promise<OpenEnvSession> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, {
        handshakeTimeout: timeoutMs,
        // Checked at each frame's header: a larger answer is never buffered.
        maxPayload: options.maxAnswerBytes,
        perMessageDeflate: false,
      });
      const fail = (message: string) => {
        ws.removeAllListeners();
        ws.on("error", () => {});
        ws.terminate();
        reject(
          new OpenEnvFailure(
            "openenv_connect",
            `cannot open a session on ${withoutSecrets(url)}: ${message}`,
          ),
        );
      };
      ws.once("open", () => {
        ws.removeAllListeners();
        resolve(new OpenEnvSession(url, ws, options));
      });
      ws.once("error", (error) => fail(error.message));
      ws.once("unexpected-response", (_request, response) =>
        fail(`HTTP ${response.statusCode} at the upgrade`),
      );
    });
  }

  /** Sends `message` and waits for its observation, at most `timeoutMs`. */
  request(message: Record<string, unknown>, what: string, timeoutMs: number): Promise<ObservationAnswer> {
    if (this.gone) return Promise.reject(this.gone);
    if (this.pending)
      return Promise.reject(new Error(`a ${this.pending.what} is still waiting for its answer`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending = null;
        const lost = new OpenEnvFailure(
          "openenv_timeout",
          `no answer to ${what} from ${this.url} within ${timeoutMs / 1000} s`,
        );
        this.lost(lost);
        reject(new OpenEnvFailure("openenv_timeout", `${lost.detail} (step_timeout_s)`));
      }, timeoutMs);
      this.pending = { what, resolve, reject, timer };
      if (this.early !== null) {
        const frame = this.early;
        this.early = null;
        this.received(frame);
        return;
      }
      this.ws.send(JSON.stringify(message));
    });
  }

  /**
   * Ends the session with OpenEnv's close message, and lets the server close the socket: an
   * OpenEnv server ends the session first, so once the socket is closed the server no longer
   * counts it and the next session there is not refused. Settles then, or after CLOSE_WAIT_MS;
   * a server that keeps the socket open is closed on after SERVER_CLOSE_MS.
   */
  close(): Promise<void> {
    const closed = Promise.race([
      this.socketClosed,
      new Promise<void>((resolve) => setTimeout(resolve, CLOSE_WAIT_MS).unref()),
    ]);
    if (this.gone) return closed;
    const why = new OpenEnvFailure("openenv_closed", `rollgym closed the session on ${this.url}`);
    this.gone = why;
    if (this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ type: "close" }));
      const ours = setTimeout(() => this.ws.close(1000), SERVER_CLOSE_MS).unref();
      void this.socketClosed.then(() => clearTimeout(ours));
    } else this.ws.terminate();
    const pending = this.pending;
    this.pending = null;
    if (pending) {
      clearTimeout(pending.timer);
      pending.reject(why);
    }
    return closed;
  }

  private received(frame: string | null): void {
    const pending = this.pending;
    if (pending === null) {
      // Answered later, to the request that comes next (or dropped once the session is gone).
      if (this.early === null && frame !== null) this.early = frame;
      return;
    }
    this.pending = null;
    clearTimeout(pending.timer);
    let answer: ReturnType<OpenEnvSession["answerOf"]>;
    try {
      answer = this.answerOf(frame, pending.what);
    } catch (error) {
      // Whatever the server sent, a fault reading it fails this request, never the process.
      answer = new OpenEnvFailure(
        "openenv_garbage",
        `${this.url}: an answer rollgym could not read (${error})`,
      );
    }
    if (answer instanceof OpenEnvRefused) pending.reject(answer);
    else if (answer instanceof OpenEnvFailure) {
      // After a garbage answer the session's state is unknown: it is not used again.
      this.lost(answer);
      pending.reject(answer);
    } else pending.resolve(answer);
  }

  /** The observation a frame carries, or the error it is. */
  private answerOf(frame: string | null, what: string): ObservationAnswer | OpenEnvFailure | OpenEnvRefused {
    const garbage = (why: string) =>
      new OpenEnvFailure("openenv_garbage", `${this.url} answered ${what} with ${why}`);
    if (frame === null) return garbage("a binary frame (OpenEnv answers are JSON text)");
    let value: unknown;
    try {
      value = parseJson(frame);
    } catch (error) {
      return garbage(
        error instanceof JsonTooDeepError
          ? `JSON ${error.message}`
          : `text that is not JSON: ${clip(frame, 80)}`,
      );
    }
    const checked = checkAnswer(value);
    if (!checked.ok) return garbage(checked.problem);
    const { type, data } = checked.answer;
    if (type === "error") {
      // Both end up in an episode's failure reason: kept to a line.
      const code = clip(data.code, 40);
      const message = clip(data.message, 500);
      if (code === "CAPACITY_REACHED") return new OpenEnvCapacity(this.url, message, reportedMax(data));
      if (REQUEST_ERRORS.has(code)) return new OpenEnvRefused(this.url, code, message);
      return new OpenEnvFailure("openenv_session_error", `${code || "error"} from ${this.url}: ${message}`);
    }
    if (type !== "observation") return garbage(`a ${preview(type)} message, not an observation`);
    return {
      observation: data.observation as Record<string, unknown>,
      reward: data.reward ?? null,
      done: data.done,
    };
  }

  /** The socket is gone (or unusable): a waiting request fails with why, later ones too. */
  private lost(why: OpenEnvFailure): void {
    this.gone ??= why;
    const pending = this.pending;
    if (pending) {
      this.pending = null;
      clearTimeout(pending.timer);
      pending.reject(
        new OpenEnvFailure(why.reason, `${why.detail} while ${pending.what} waited for its answer`),
      );
    }
    if (this.ws.readyState !== WebSocket.CLOSED) this.ws.terminate();
  }
}

/** The bytes of a frame as ws hands it over. */
function rawBytes(data: WebSocket.RawData): number {
  if (Array.isArray(data)) return data.reduce((sum, chunk) => sum + chunk.byteLength, 0);
  return data.byteLength;
}

/** The max_sessions a CAPACITY_REACHED reports, when it is a count. */
function reportedMax(data: Record<string, unknown>): number | null {
  const max = data.max_sessions;
  return typeof max === "number" && Number.isInteger(max) && max > 0 ? max : null;
}
