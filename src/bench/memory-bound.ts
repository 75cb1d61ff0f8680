// The server's RSS bound at a bench case's settings, from docs/server.md "Memory bounds, from the
// limits": the lines a bench's trainers can fill, each at the settings the bench gives serve.
import { TOKEN_ID_BYTES } from "../server/memory-costs.ts";

const MIB = 2 ** 20;
const KIB = 2 ** 10;

/** docs/server.md: the server's own RSS at start, and the one term not derived from a limit. */
const AT_START_MIB = 150;
const HEADROOM_MIB = 300;
/** "Memory behind a slow client": a held, played episode costs at most this at the peak. */
const EPISODE_PEAK_BYTES = 16 * KIB;
/** The frame being received (max_frame_bytes) and one socket read, per connection. */
const RECEIVING_BYTES = MIB + 64 * KIB;
/** An open connection (socket, WebSocket, session). */
const CONNECTION_BYTES = 64 * KIB;
/**
 * An engine request in flight: its connection, the request and the answer being read, and a
 * 4 KiB history JSON of its own ("engine requests in flight": 10,240 of them grew RSS by
 * 17.9–18.2 KiB each).
 */
const ENGINE_REQUEST_BYTES = 20 * KIB;
/** MAX_CLIENT_DECODED_BYTES: the frame being decoded. */
const DECODING_BYTES = 16 * MIB;

export interface RssBound {
  bytes: number;
  /** The arithmetic, in MiB, as the docs write it. */
  derivation: string;
}

/**
 * The bound for `episodes` in flight, played by `clients` trainer connections whose rollouts may
 * each hold `bufferedGroups` finished groups of `groupSize` for acknowledgement, with at most
 * `engineRequests` engine requests in flight (rollgym.llm.concurrency × replicas). In token mode
 * `tokenLogIds` is the longest token log an episode reached (null in chat mode): every held
 * episode is counted with a log that long.
 */
export function rssBound(shape: {
  episodes: number;
  groupSize: number;
  clients: number;
  bufferedGroups: number;
  engineRequests: number;
  tokenLogIds?: number | null;
}): RssBound {
  const held = shape.episodes + shape.clients * shape.bufferedGroups * shape.groupSize;
  const terms: [string, number][] = [
    ["at start", AT_START_MIB * MIB],
    ["headroom", HEADROOM_MIB * MIB],
    [`${held} episodes held (in flight + buffered groups) × 16 KiB`, held * EPISODE_PEAK_BYTES],
    [
      `${shape.clients} connection(s) × (1 MiB + 64 KiB received + 64 KiB open)`,
      shape.clients * (RECEIVING_BYTES + CONNECTION_BYTES),
    ],
    ["frame being decoded", DECODING_BYTES],
    [
      `${shape.engineRequests} engine requests in flight × 20 KiB`,
      shape.engineRequests * ENGINE_REQUEST_BYTES,
    ],
  ];
  const ids = shape.tokenLogIds ?? null;
  // A token id as the memory budget charges it; bench/token-log-memory.ts measured 54.5 B of heap
  // and 115-118 B of RSS per id of 4,096 logs of 692 ids after a full GC (three runs).
  if (ids !== null)
    terms.push([
      `${held} episodes held × token logs of ${ids} ids × ${TOKEN_ID_BYTES} B`,
      held * ids * TOKEN_ID_BYTES,
    ]);
  const bytes = terms.reduce((sum, [, b]) => sum + b, 0);
  const mib = (b: number) => Number((b / MIB).toFixed(1));
  return {
    bytes,
    derivation:
      `${terms.map(([name, b]) => `${mib(b)} (${name})`).join(" + ")} = ${mib(bytes)} MiB ` +
      `(docs/server.md "Memory bounds, from the limits")`,
  };
}
