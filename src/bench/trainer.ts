// A simulated trainer: one WebSocket to `rollgym serve`, speaking the real protocol
// (protocol/PROTOCOL.md) the way a training loop does. It asks for stream rollouts, keeps the
// server supplied with credit, decodes every group frame and acknowledges it, and records when
// each group arrived. As the trainer session (`role: "trainer"`) it also brackets weight updates
// (begin_update … end_update) and plays endless, paced streams. It does no training, so what it
// costs is the client's share of a real run.
import { readI32 } from "../../protocol/codec.ts";
import type { GroupFrame, Version } from "../../protocol/messages.ts";
import type { PauseMode } from "../../protocol/settings.ts";
import { NodeClient, UpgradeRefused } from "../client/node.ts";
import { closedError, type Frame, helloFrame } from "../client/protocol-client.ts";
export type ChatMessages = { role: string; content: string }[];

export interface RolloutSpec {
  id: string;
  tag: string;
  groups: number;
  groupSize: number;
  seed: number;
  maxTurn: number;
  maxTokens: number;
  /** Token in, token out (the rollout frame's `tokens`): exact token logs instead of chat. */
  tokens?: boolean;
  /** An endless stream paced against the trainer's versions (PROTOCOL.md "Staleness"), by wire name. */
  endless?: { in_flight: number; max_staleness: number; groups_per_step: number; strict_staleness?: boolean };
}

/** The counts a group was admitted under (its frame's `admitted`, PROTOCOL.md "Staleness"). */
type Admitted = NonNullable<GroupFrame["admitted"]>;

/** A group as the trainer saw it arrive. */
export interface ArrivedGroup {
  rollout: string;
  group: number;
  episodes: number;
  failed: number;
  /** The oldest dispatch ordinal over its turns; null before the trainer's first update. */
  minVersion: number | null;
  admitted: Admitted | null;
  /** performance.now() when the frame was decoded. */
  at: number;
  /** Ids in its longest token log (token mode; 0 without token logs). */
  longestLog: number;
}

export interface RolloutResult {
  episodes: number;
  failed: number;
  /** Groups the server says it sent, from the batch frame (and an endless stream's window frames). */
  sent: number[];
}

/** A weight update as the trainer timed it (performance.now() milliseconds). */
export interface UpdateTiming {
  /** begin_update sent → update_begun (every replica paused). */
  pausingMs: number;
  /** begin_update sent → update_ended (admission closed the whole time). */
  pausedMs: number;
  /** Engine requests in flight when admission closed (update_begun's `in_flight`). */
  inFlight: number;
}

interface Running {
  resolve: (result: RolloutResult) => void;
  reject: (error: Error) => void;
}

export class TrainerClient {
  private readonly client: NodeClient;
  private readonly running = new Map<string, Running>();
  /** Groups sent per rollout, as its window frames list them (an endless stream). */
  private readonly windowSent = new Map<string, number[]>();
  /** Groups received since the last ack, by rollout: acknowledged together once per tick. */
  private readonly toAck = new Map<string, number[]>();
  private ackScheduled = false;
  onGroup: (group: ArrivedGroup) => void = () => {};

  private constructor(client: NodeClient) {
    this.client = client;
    client.onFrame((frame) => this.receive(frame));
    client.onClose((code, reason) => {
      const error = closedError(code, reason);
      for (const r of this.running.values()) r.reject(error);
      this.running.clear();
    });
  }

  /** Connects to `serverUrl` (http://HOST:PORT) and completes the handshake. */
  static async connect(
    serverUrl: string,
    options: { token?: string | null; credit: number; trainer?: boolean },
  ): Promise<TrainerClient> {
    const { client } = await NodeClient.connect(serverUrl, null, {
      token: options.token,
      perMessageDeflate: false,
      maxPayload: 0,
      closeFailsWaits: true,
    }).catch((error: Error) => {
      throw new Error(
        error instanceof UpgradeRefused
          ? `${serverUrl} refused the WebSocket: ${error.message}`
          : `cannot connect to ${serverUrl}: ${error.message}`,
      );
    });
    const trainer = new TrainerClient(client);
    const hello = helloFrame("rollgym-bench", options.trainer ? { role: "trainer" } : {});
    const welcome = await trainer.request(hello, "welcome");
    if (welcome.type !== "welcome")
      throw new Error(`the server did not welcome the bench: ${describe(welcome)}`);
    trainer.send({ type: "credit", groups: options.credit });
    return trainer;
  }

  /** Starts a stream rollout; resolves with its batch counts once every group has arrived. */
  rollout(spec: RolloutSpec): Promise<RolloutResult> {
    return new Promise((resolve, reject) => {
      this.running.set(spec.id, { resolve, reject });
      this.send({
        type: "rollout",
        id: spec.id,
        tags: [{ tag: spec.tag, groups: spec.groups }],
        mode: "train",
        group_size: spec.groupSize,
        seed: spec.seed,
        max_turn: spec.maxTurn,
        sampling: { max_tokens: spec.maxTokens },
        delivery: "stream",
        ...(spec.tokens ? { tokens: true } : {}),
        ...(spec.endless ? { endless: true, ...spec.endless } : {}),
      });
    });
  }

  /** Ends a rollout: an endless stream's `batch` frame follows the groups still in flight. */
  cancel(id: string): void {
    this.send({ type: "cancel", rollout: id });
  }

  /**
   * One weight update: begin_update (the server pauses every replica in `mode`), `load` (the
   * trainer moves its weights), end_update under `version`.
   */
  async update(
    id: string,
    version: Version,
    mode: PauseMode,
    load: () => Promise<void>,
  ): Promise<UpdateTiming> {
    const began = performance.now();
    const begun = await this.request({ type: "begin_update", id, mode }, "update_begun");
    const pausing = performance.now() - began;
    await load();
    await this.request({ type: "end_update", id, version }, "update_ended");
    return { pausingMs: pausing, pausedMs: performance.now() - began, inFlight: begun.in_flight as number };
  }

  /**
   * The chats rollgym's policy sends for `episodes` episodes of `tag`, every turn of each: the
   * episodes are played through env hosting, with `answer` (the engine) writing each response.
   */
  async promptMix(
    tag: string,
    episodes: number,
    seed: number,
    maxTurn: number,
    answer: (messages: ChatMessages) => Promise<string>,
  ): Promise<ChatMessages[]> {
    const id = "bench-prompts";
    const opened = await this.request(
      { type: "env_open", id, tag, groups: episodes, group_size: 1, seed, max_turn: maxTurn },
      "env_opened",
    );
    if (opened.type !== "env_opened") throw new Error(`env_open failed: ${describe(opened)}`);
    let live = new Map(
      (opened.episodes as { env_id: number; messages: ChatMessages }[]).map((e) => [e.env_id, e.messages]),
    );
    const mix: ChatMessages[] = [];
    for (let turn = 0; turn < maxTurn && live.size > 0; turn++) {
      const chats = [...live];
      mix.push(...chats.map(([, messages]) => messages));
      const texts = await Promise.all(chats.map(([, messages]) => answer(messages)));
      const stepped = await this.request(
        { type: "env_step", id, responses: chats.map(([env_id], i) => ({ env_id, text: texts[i] })) },
        "env_stepped",
      );
      if (stepped.type !== "env_stepped") throw new Error(`env_step failed: ${describe(stepped)}`);
      const next = new Map<number, ChatMessages>();
      for (const r of stepped.results as { env_id: number; messages: ChatMessages | null; keep?: number }[]) {
        if (r.messages === null) continue;
        // A server may send only the new messages after the first `keep` of the previous chat.
        const before = live.get(r.env_id) ?? [];
        next.set(r.env_id, r.keep === undefined ? r.messages : [...before.slice(0, r.keep), ...r.messages]);
      }
      live = next;
    }
    await this.request({ type: "env_close", id }, "env_closed");
    return mix;
  }

  close(): void {
    if (this.client.closeCode === null) this.client.close(1000);
  }

  private send(frame: Frame): void {
    this.client.send(frame);
  }

  /**
   * Sends `frame` and resolves with the next `type` frame; rejects with an error frame that
   * names no running rollout, or the close.
   */
  private async request(frame: Frame, type: string): Promise<Frame> {
    const answer = this.client.next(
      (f) => f.type === type || (f.type === "error" && !this.running.has(f.rollout as string)),
      null,
    );
    this.send(frame);
    const reply = await answer;
    if (reply.type === "error") throw serverError(reply);
    return reply;
  }

  private receive(frame: Frame): void {
    switch (frame.type) {
      case "group": {
        const rollout = frame.rollout as string;
        const episodes = frame.episodes as { failure: string | null }[];
        this.onGroup({
          rollout,
          group: frame.group as number,
          episodes: episodes.length,
          failed: episodes.filter((e) => e.failure !== null).length,
          minVersion: (frame.min_version as number | undefined) ?? null,
          admitted: (frame.admitted as Admitted | undefined) ?? null,
          at: performance.now(),
          longestLog: longestLog(frame.token_offsets_i32 as Uint8Array | undefined),
        });
        const list = this.toAck.get(rollout) ?? [];
        list.push(frame.group as number);
        this.toAck.set(rollout, list);
        this.scheduleAck();
        return;
      }
      case "window": {
        const id = frame.rollout as string;
        const sent = this.windowSent.get(id) ?? [];
        sent.push(...sentGroups(frame));
        this.windowSent.set(id, sent);
        return;
      }
      case "batch": {
        const id = frame.rollout as string;
        this.flushAcks();
        this.send({ type: "ack", rollout: id, groups: [], batch: true });
        const sent = [...(this.windowSent.get(id) ?? []), ...sentGroups(frame)];
        this.windowSent.delete(id);
        this.running
          .get(id)
          ?.resolve({ episodes: frame.episodes as number, failed: frame.failed as number, sent });
        this.running.delete(id);
        return;
      }
      case "error": {
        // An error naming no running rollout answers a request (see `request`).
        const rollout = frame.rollout as string | undefined;
        if (rollout && this.running.has(rollout)) {
          this.running.get(rollout)?.reject(serverError(frame));
          this.running.delete(rollout);
        }
        return;
      }
    }
  }

  /** Acks and the matching credit go out once per event-loop turn, as a batching trainer would. */
  private scheduleAck(): void {
    if (this.ackScheduled) return;
    this.ackScheduled = true;
    setImmediate(() => this.flushAcks());
  }

  private flushAcks(): void {
    this.ackScheduled = false;
    let groups = 0;
    for (const [rollout, list] of this.toAck) {
      this.send({ type: "ack", rollout, groups: list });
      groups += list.length;
    }
    this.toAck.clear();
    if (groups > 0) this.send({ type: "credit", groups });
  }
}

/**
 * The groups a batch or window frame says were sent: every verdict's groups but those that never
 * started or were dropped for their age (no group frame comes for either).
 */
function sentGroups(frame: Frame): number[] {
  const list = (field: string) => (frame[field] as number[] | undefined) ?? [];
  const unsent = new Set([...list("not_started"), ...list("stale_dropped")]);
  return [...new Set([...list("kept"), ...list("dropped"), ...list("failed_groups")])].filter(
    (g) => !unsent.has(g),
  );
}

function serverError(frame: Frame): Error {
  return new Error(`server error ${frame.code}: ${frame.message}`);
}

function describe(frame: Frame): string {
  return frame.type === "error" ? `${frame.code}: ${frame.message}` : `unexpected ${frame.type} frame`;
}

/** The longest token log of a group frame, from its offsets (0 when it has none). */
function longestLog(offsets: Uint8Array | undefined): number {
  if (offsets === undefined) return 0;
  const at = readI32(offsets);
  let longest = 0;
  for (let i = 1; i < at.length; i++) longest = Math.max(longest, at[i] - at[i - 1]);
  return longest;
}
