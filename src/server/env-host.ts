// Env hosting: the trainer owns inference and rollgym plays RAGEN's env manager and context
// manager. Episodes are the engine's own, so given the same responses they end exactly as
// `rollgym rollout` would end them. In a token session the trainer sends the ids its engine
// sampled and gets back the ids to append before the next turn, rendered by rollgym's engine
// exactly as a token-mode rollout renders them, so the episode's token log travels too.
import type { EnvRegistry } from "../../envs/registry.ts";
import type { EnvStep } from "../../protocol/messages.ts";
import { messageOf } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import type { ChatMessage } from "../llm/chat.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import type { EpisodeRecord, TurnRecord } from "../record/episode-record.ts";
import { type BatchRequest, groupEpisodes, groupTags, tagMetrics } from "../rollout/batch.ts";
import type { Episode } from "../rollout/episode.ts";
import { TokenLog } from "../rollout/token-log.ts";
import { episodesBytes, STEP_BYTES, TOKEN_ID_BYTES, textBytes } from "./memory-costs.ts";
import type { SessionMemory } from "./session.ts";

type Responses = EnvStep["responses"];

/** Episodes built (or stepped) between two yields to the event loop. */
export const OPEN_SLICE_EPISODES = 256;

/** What an env_stepped result's `messages` holds (PROTOCOL.md "Env hosting"). */
export type MessagesMode = "new" | "full";

export class HostedEnvs {
  readonly request: BatchRequest;
  private readonly registry: EnvRegistry;
  private readonly episodes: Episode[] = [];
  private readonly messagesMode: MessagesMode;
  /**
   * Bytes this session holds (EPISODE_BYTES per episode from the start, a remote env's session
   * too, then STEP_BYTES per
   * response, its text, TOKEN_ID_BYTES per id), counted by the connection when a step is accepted
   * (before it runs) against the memory budget; ids the engine appends count once known.
   */
  heldBytes = 0;
  /** Closes the session after env_idle_s without a step (connection.ts); cleared on dispose. */
  idleTimer: NodeJS.Timeout | null = null;
  /** The session's memory account (budget.ts). */
  private readonly account: SessionMemory;
  /** Token sessions only: the engine that renders deltas, and one log per episode. */
  private readonly tokens: TokenEngine | null;
  private readonly logs: TokenLog[] = [];
  /** Token sessions: each episode's chat so far (raw responses), which continuations are rendered from. */
  private readonly chats: ChatMessage[][] = [];
  private readonly affinity: string;
  /** Token steps await the engine; they run one after another, in arrival order. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Aborts the session's engine requests when it is closed or its connection goes. */
  private readonly stop = new AbortController();
  private readonly forget: (affinity: string) => void;

  constructor(
    registry: EnvRegistry,
    request: BatchRequest,
    tokens: TokenEngine | null = null,
    affinity = "env",
    forget: (affinity: string) => void = () => {},
    messagesMode: MessagesMode,
    account: SessionMemory,
  ) {
    this.account = account;
    this.registry = registry;
    this.request = request;
    this.tokens = tokens;
    this.affinity = affinity;
    this.forget = forget;
    this.messagesMode = messagesMode;
    this.charge(episodesBytes(registry, request.tags, request.groupSize));
  }

  /** Episodes this session hosts (known before they are built). */
  get size(): number {
    return this.request.tags.reduce((n, t) => n + t.groups, 0) * this.request.groupSize;
  }

  /**
   * Builds the episodes (each resets its env) in slices of OPEN_SLICE_EPISODES, yielding to the
   * event loop between slices so a large session does not hold up other clients. Stops early
   * when the session is disposed.
   */
  async build(): Promise<void> {
    let sinceYield = 0;
    let sliceStart = performance.now();
    for (const [group, tag] of groupTags(this.request).entries()) {
      if (this.stop.signal.aborted) throw new Error("env session closed");
      const built = groupEpisodes(this.registry, this.request, group, tag, (bytes) => this.charge(bytes));
      this.episodes.push(...built);
      // A remote env's reset answers later; the group's resets run together.
      const resets = built.flatMap((e) => (e.ready ? [e.ready] : []));
      if (resets.length > 0) await Promise.all(resets);
      sinceYield += this.request.groupSize;
      // Sokoban levels take milliseconds each to generate: a slice also ends after 5 ms.
      if (sinceYield >= OPEN_SLICE_EPISODES || performance.now() - sliceStart > 5) {
        sinceYield = 0;
        await new Promise<void>((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
      }
    }
  }

  get tokenSession(): boolean {
    return this.tokens !== null;
  }

  /** Runs `task` after every earlier queued task of this session. */
  serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.queue.then(task, task);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Counts `bytes` more (or fewer) held by this env session, and by its session's account. */
  charge(bytes: number): void {
    this.heldBytes += bytes;
    this.account.charge("env", bytes);
  }

  /** Ends the session's engine work (a closed session or connection), its routing state and its bytes. */
  dispose(): void {
    this.stop.abort(new Error("env session closed"));
    for (const episode of this.episodes) episode.close();
    this.forget(this.affinity);
    this.charge(-this.heldBytes);
    if (this.idleTimer) clearTimeout(this.idleTimer);
  }

  /** Token sessions: render every episode's first prompt (once) before `opened()`. */
  async renderPrompts(): Promise<void> {
    const engine = this.tokens;
    const signal = this.stop.signal;
    if (!engine) return;
    const prompts = await Promise.all(
      this.episodes.map((e) => engine.firstPrompt(e.promptMessages(), e.prefill, this.affinity, signal)),
    );
    prompts.forEach((ids, i) => {
      this.logs[i] = new TokenLog(ids);
      this.chats[i] = [...this.episodes[i].promptMessages()];
      this.charge(ids.length * TOKEN_ID_BYTES);
    });
  }

  opened(): {
    env_id: number;
    group: number;
    seed: number;
    messages: ReturnType<Episode["promptMessages"]>;
    prompt_ids?: number[];
  }[] {
    return this.episodes.map((e, i) => ({
      env_id: e.envId,
      group: e.groupId,
      seed: e.seed,
      messages: e.promptMessages(),
      ...(this.tokens ? { prompt_ids: [...this.logs[i].ids] } : {}),
    }));
  }

  /** Every response names an open, active episode once (and carries its ids in a token session). */
  private check(responses: Responses): void {
    const seen = new Set<number>();
    for (const { env_id, sampled_ids, logprobs } of responses) {
      const episode = this.episodes[env_id];
      if (!episode) throw new RollgymError("unknown_env_id", { envId: env_id, open: this.episodes.length });
      if (!episode.active) throw new RollgymError("episode_done", { envId: env_id });
      if (seen.has(env_id))
        throw new RollgymError("bad_responses", {
          message: `env_id ${env_id} appears twice in one env_step`,
        });
      seen.add(env_id);
      if (this.tokens && sampled_ids === undefined)
        throw new RollgymError("bad_responses", {
          message: `env_id ${env_id}: a token session needs sampled_ids with each response`,
        });
      if (logprobs !== undefined && logprobs.length !== (sampled_ids?.length ?? -1))
        throw new RollgymError("bad_responses", {
          message: `env_id ${env_id}: logprobs has ${logprobs.length} entries for ${sampled_ids?.length ?? 0} sampled_ids`,
        });
    }
  }

  /** What an env_step would add (checked against the byte limits before it is applied). */
  static bytesOf(responses: Responses): number {
    let bytes = 0;
    for (const r of responses)
      bytes += STEP_BYTES + textBytes(r.text) + (r.sampled_ids?.length ?? 0) * TOKEN_ID_BYTES;
    return bytes;
  }

  /**
   * Apply one response per listed episode; all are checked before any is applied. Applied in
   * slices of OPEN_SLICE_EPISODES with a yield between them, so a step of thousands of
   * responses does not hold up other clients.
   */
  async step(responses: Responses): Promise<Record<string, unknown>[]> {
    if (this.tokens) throw new Error("a token session steps through stepTokens");
    this.check(responses);
    const results: Record<string, unknown>[] = [];
    for (let i = 0; i < responses.length; i += OPEN_SLICE_EPISODES) {
      if (i > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      const slice = responses
        .slice(i, i + OPEN_SLICE_EPISODES)
        .map(({ env_id, text }) => this.apply(env_id, text));
      // Remote envs step concurrently; in-process ones answered already.
      for (const result of slice) results.push(result instanceof Promise ? await result : result);
    }
    return results;
  }

  /** A token session's step: the sampled ids join the log, and each reply carries the ids to append. */
  async stepTokens(responses: Responses): Promise<Record<string, unknown>[]> {
    const engine = this.tokens;
    const signal = this.stop.signal;
    if (!engine) throw new Error("not a token session");
    this.check(responses);
    const results = await Promise.all(
      responses.map(async ({ env_id, text, sampled_ids, logprobs }) => {
        const log = this.logs[env_id];
        // Unknown logprobs stay unknown (NaN), never a made-up certainty.
        log.sampled(sampled_ids!, logprobs ?? new Array<number>(sampled_ids!.length).fill(Number.NaN));
        let result = this.apply(env_id, text);
        if (result instanceof Promise) result = await result;
        log.reward(result.reward as number);
        return result;
      }),
    );
    return Promise.all(
      results.map(async (result, i) => {
        const { env_id } = responses[i];
        const episode = this.episodes[env_id];
        if (!episode.active) return { ...result, next_ids: null };
        const log = this.logs[env_id];
        const chat = this.chats[env_id];
        const said = episode.prefill + responses[i].text;
        chat.push({ role: "assistant", content: said }, episode.lastPromptMessage());
        // The chat's own copy of the response (the user message is the episode's string).
        this.charge(textBytes(said));
        // The trainer's engine did not say how the turn ended: only its own end-of-turn token is known.
        const end = { lastId: log.last, stoppedOnToken: false };
        const next = await engine.continuation(chat, end, episode.prefill, this.affinity, signal);
        log.inserted(next);
        this.charge(next.length * TOKEN_ID_BYTES);
        return { ...result, next_ids: next };
      }),
    );
  }

  /** One response applied; a promise only when the episode's env is remote. */
  private apply(envId: number, text: string): Record<string, unknown> | Promise<Record<string, unknown>> {
    const episode = this.episodes[envId];
    const before = this.messagesMode === "new" ? episode.promptMessages() : null;
    const turn = episode.applyResponse(episode.prefill + text, "stop");
    if (turn instanceof Promise)
      return turn.then(
        (t) => this.applied(episode, before, t),
        (error) => {
          // The remote env failed the step: the episode ends failed (env_closed's record says why).
          episode.fail(`turn ${episode.turnIndex + 1}: ${messageOf(error)}`);
          return this.applied(episode, before, null);
        },
      );
    return this.applied(episode, before, turn);
  }

  private applied(
    episode: Episode,
    before: ChatMessage[] | null,
    turn: TurnRecord | null,
  ): Record<string, unknown> {
    const envId = episode.envId;
    if (!episode.active) episode.close();
    const record = episode.active ? null : episode.record();
    const next = episode.active ? episode.promptMessages() : null;
    // "new": only what changed since the previous turn's chat, so replies stay the size of a turn.
    const keep = before && next ? commonPrefix(before, next) : 0;
    return {
      env_id: envId,
      parsed: turn?.parsed ?? [],
      actions: turn?.actions ?? [],
      reward: turn?.reward ?? 0,
      reward_text: turn?.reward_text ?? "0",
      format_penalty: turn?.format_penalty ?? false,
      done: !episode.active,
      success: record?.success ?? false,
      messages: next && before ? next.slice(keep) : next,
      ...(before && next ? { keep } : {}),
    };
  }

  close(): { episodes: EpisodeRecord[]; metrics: Record<string, number> } {
    const episodes = this.episodes.map((e, i) => {
      const record = e.record();
      if (this.tokens && this.logs[i]) record.tokens = this.logs[i].record();
      return record;
    });
    return { episodes, metrics: tagMetrics(episodes, this.request) };
  }
}

/** How many leading messages two chats share (same role and content). */
function commonPrefix(a: readonly ChatMessage[], b: readonly ChatMessage[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i].role === b[i].role && a[i].content === b[i].content) i++;
  return i;
}
