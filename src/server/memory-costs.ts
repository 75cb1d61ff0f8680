// What things cost to hold, for the memory budget (budget.ts, docs/server.md "Memory budget"),
// and the meter that charges a rollout's play as it goes.
import type { EnvRegistry } from "../../envs/registry.ts";
import type { EpisodeRecord, TurnRecord } from "../record/episode-record.ts";
import type { SessionMemory } from "./session.ts";

/**
 * What things cost to hold, measured (docs/server.md "Memory budget"): an episode's env, prompt
 * and state (about 1.5 KiB for a Sokoban episode); each turn or env step a turn record and a chat
 * message (about 390 bytes with an empty text) plus its texts, at one byte per character (two
 * when not Latin-1); each token id, sampled or appended, in four arrays (id, mask, logprob,
 * reward) with their growth headroom. A group held for resume costs its encoded frame, exactly.
 */
export const EPISODE_BYTES = 2048;
export const STEP_BYTES = 512;
export const TOKEN_ID_BYTES = 128;
/**
 * An episode's session on a remote OpenEnv server (env_type openenv): its WebSocket client,
 * measured at 4.3 KiB of heap per session (1,000 sessions, after GC).
 */
export const REMOTE_SESSION_BYTES = 5120;
/**
 * A session rollgym serves on /openenv/TAG/ws: its env, socket and outbound queue, measured at
 * 8.3 KiB of heap and 0.4 KiB outside it per CoordSokoban session (1,000 sessions, after GC).
 */
export const OPENENV_SESSION_BYTES = 10240;

/** What the episodes of `tags` (with `groupSize` each group) hold from admission: a remote env's session too. */
export function episodesBytes(
  registry: EnvRegistry,
  tags: readonly { tag: string; groups: number }[],
  groupSize: number,
): number {
  let bytes = 0;
  for (const { tag, groups } of tags)
    bytes += groups * groupSize * (EPISODE_BYTES + (registry.tag(tag).type.open ? REMOTE_SESSION_BYTES : 0));
  return bytes;
}

/**
 * A character outside Latin-1, which makes V8 store the text at two bytes per character (the
 * control characters below tab are Latin-1 too; a text with them is charged two, to keep the
 * pattern free of control characters).
 */
const WIDE = /[^\t-\u00ff]/;

/** The bytes V8 stores `text` in. */
export function textBytes(text: string): number {
  return text.length * (WIDE.test(text) ? 2 : 1);
}

/**
 * What one rollout's play holds, by group: each episode's EPISODE_BYTES (and a remote env's
 * REMOTE_SESSION_BYTES) from when its group is
 * admitted (a batch delivery's whole batch at once, under group -1), then its turns and token
 * log as they are played. A group's bytes go when its frame is queued (the session then holds
 * the frame); the rest when the rollout ends.
 */
export class PlayMeter {
  private readonly account: SessionMemory;
  private readonly byGroup = new Map<number, number>();

  constructor(account: SessionMemory) {
    this.account = account;
  }

  /** Episodes admitted for `group` (-1: the whole batch), holding `bytes` (episodesBytes). */
  admit(group: number, bytes: number): void {
    this.add(group, bytes);
  }

  /** A turn was recorded: `turn` is the new record (told once per record, not again after a failed turn). */
  turn(group: number, turn: TurnRecord): void {
    this.add(
      group,
      STEP_BYTES + textBytes(turn.state) + textBytes(turn.raw_response) + textBytes(turn.response),
    );
  }

  /** A remote env answered `bytes` (charged before the answer is parsed, held with the group). */
  envBytes(group: number, bytes: number): void {
    this.add(group, bytes);
  }

  /** An episode ended: its token log, when it has one. */
  episode(record: EpisodeRecord): void {
    if (record.tokens) this.add(record.group_id, record.tokens.ids.length * TOKEN_ID_BYTES);
  }

  /** The group's frame is queued: what its play held goes. */
  release(group: number): void {
    this.account.charge("rollouts", -(this.byGroup.get(group) ?? 0));
    this.byGroup.delete(group);
  }

  /** The rollout ended. */
  end(): void {
    for (const group of [...this.byGroup.keys()]) this.release(group);
  }

  private add(group: number, bytes: number): void {
    this.byGroup.set(group, (this.byGroup.get(group) ?? 0) + bytes);
    this.account.charge("rollouts", bytes);
  }
}
