// Each attack row's RSS bound, derived from the server's limits with their defaults, as
// docs/server.md "Memory bounds, from the limits" does it: one term for what the server needs
// anyway (HEADROOM), plus the parts of the table the row's clients can fill. In MiB.
import { MAX_CLIENT_DECODED_BYTES } from "../../protocol/codec.ts";
import { DEFAULT_LIMITS } from "../../src/server/state.ts";
import { DEFAULT_WATCH_LIMITS } from "../../src/server/watch.ts";
import { CHECK_HEAP_MIB, CHECKS_AT_ONCE, DEFAULT_FILE_LIMITS } from "../../src/server/web/files.ts";

const MiB = 1 << 20;
const L = DEFAULT_LIMITS;

/**
 * What a server with nothing held may take besides its baseline: allocator and GC headroom,
 * the young generation, and V8 letting garbage build up between full GCs (#10's allowance;
 * the baseline row, with only the bystander, is its noise floor).
 */
export const HEADROOM = 300;

/** Bytes one socket read may bring in beyond the frame being received (libuv reads 64 KiB at a time). */
const READ_BYTES = 64 << 10;

/**
 * `connections` sending frames at once: each holds at most one frame being received and one
 * read (reading stops while its frames wait), and the server decodes one frame at a time, to
 * at most MAX_CLIENT_DECODED_BYTES of heap.
 */
export const frames = (connections: number): number =>
  (connections * (L.maxFrameBytes + READ_BYTES) + MAX_CLIENT_DECODED_BYTES) / MiB;

/** Each held episode at the peak, garbage included (docs/server.md "Memory behind a slow client"). */
const EPISODE_PEAK_KIB = 16;

/** `episodes` held (rollouts in flight, groups held for acknowledgement, env sessions). */
export const episodes = (n: number): number => (n * EPISODE_PEAK_KIB) / 1024;

/** `bytes` of text held in env sessions, at 1.1 × in RSS (the env_bytes_across_connections row). */
export const text = (bytes: number): number => (1.1 * bytes) / MiB;

/** The memory budget filled with text: max_held_bytes at 1.1 ×. */
export const heldText = (): number => text(L.maxHeldBytes);

/** One session at its share of episodes. */
export const shareOfEpisodes = (): number => episodes(L.maxEpisodesPerConnection);

/** `clients` that do not read: each up to max_send_buffer_bytes buffered before it is closed. */
export const nonReaders = (clients: number): number => (clients * L.maxSendBufferBytes) / MiB;

/** Connections open at once (sockets, ws and session objects: 32 KiB each measured, 64 charged). */
export const sockets = (n: number): number => (n * 64) / 1024;

/** Uploads: kept, being received (chunks and string), being checked (CHECKS_AT_ONCE workers × their old-space heap). */
export const uploads = (): number =>
  (DEFAULT_FILE_LIMITS.maxUploadTotalBytes +
    2 * DEFAULT_FILE_LIMITS.maxConcurrentUploads * DEFAULT_FILE_LIMITS.maxUploadBytes) /
    MiB +
  CHECKS_AT_ONCE * CHECK_HEAP_MIB;

/** Watchers: max_watchers × their socket buffer (docs/server.md "Web limits"). */
export const watchers = (): number =>
  (DEFAULT_WATCH_LIMITS.maxWatchers * DEFAULT_WATCH_LIMITS.maxBufferBytes) / MiB;

/** HEADROOM plus `parts`, rounded up. */
export const bound = (...parts: number[]): number => Math.ceil(parts.reduce((a, b) => a + b, HEADROOM));
