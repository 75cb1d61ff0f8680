// What a frame handler works with: the server, the connection's session and env sessions, and
// how to answer. One per connection, made at its hello (connection.ts).
import type { WebSocket } from "ws";
import type { About } from "../../errors/boundary.ts";
import type { HostedEnvs } from "../env-host.ts";
import type { Outbound } from "../outbound.ts";
import type { Session } from "../session.ts";
import type { ServerState } from "../state.ts";

export interface Connection {
  state: ServerState;
  session: Session;
  socket: WebSocket;
  out: Outbound;
  /** This connection's env sessions by id (not resumed: they end with the connection). */
  hosted: Map<string, HostedEnvs>;
  /** Sends a frame now, outside the session's outbox (env replies, errors). */
  reply(frame: object): void;
  /** Answers with the `error` frame of `error` (errors/boundary.ts), about a rollout or env session. */
  refuse(error: unknown, about?: About): void;
  /**
   * The client did useful work, or work the server did for it ended: what keeps the connection
   * from being dropped as idle (ConnectionTicket.worked). Handlers call it once a frame has been
   * accepted, never for `credit` or for a frame that changed nothing.
   */
  worked(): void;
}
