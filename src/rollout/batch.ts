// A batch of env groups played against a policy, RAGEN's way: tags laid out in env-id order,
// every member of a group on the same seed, episodes advanced turn by turn, then scores,
// the group filter and RAGEN-named metrics. Episodes run concurrently; each one only waits
// for its own model turns, so a slow episode never holds up the others.
import type { EnvRegistry } from "../../envs/registry.ts";
import type { ChargeBytes } from "../../envs/types.ts";
import type { PaceValues } from "../../protocol/settings.ts";
import type { ChatMessage, SamplingParams } from "../llm/chat.ts";
import { HistoryJson } from "../llm/history-json.ts";
import {
  ContextLimitChanged,
  type EpisodeView,
  messagesBound,
  type Policy,
  type PolicyResponse,
  type PromptMeter,
  requestSeed,
} from "../llm/policy.ts";
import { turnSlot } from "../llm/slices.ts";
import type { TokenEngine } from "../llm/token-engine.ts";
import type { BatchResult, EpisodeRecord, GroupResult, RolloutMode } from "../record/episode-record.ts";
import { Episode, type EpisodeSettings } from "./episode.ts";
import { type FilterConfig, runGroupFilter } from "./filter.ts";
import { ragenTruncate } from "./ragen-truncation.ts";
import { episodeScores, type NormalizationGrouping, type NormalizationMethod } from "./scores.ts";
import { playTokenEpisode } from "./token-episode.ts";
import type { TokenLog } from "./token-log.ts";
import { playTurns, type TurnHooks } from "./turns.ts";

export interface BatchRequest {
  mode: RolloutMode;
  /** Tags in env-id order with their group counts (RAGEN's tags / n_groups). */
  tags: readonly { tag: string; groups: number }[];
  groupSize: number;
  /** Seed of group 0; group g plays seed + g. */
  seed: number;
  episode: EpisodeSettings;
  sampling: Omit<SamplingParams, "seed">;
  normalization: { grouping: NormalizationGrouping; method: NormalizationMethod };
  useTurnScores: boolean;
  /** Score an episode 1 if solved, else 0, instead of its summed reward (old RAGEN's binary_reward). */
  binaryReward?: boolean;
  filter: FilterConfig;
  /** How a stream rollout paces its groups against the trainer's weight versions (server/pacing.ts). */
  pace: PaceValues;
  /** When the context window is managed, max_tokens is lowered to fit but never below this. Default 32. */
  minResponseTokens?: number;
  /** Token in, token out: every episode keeps its exact token log (see token-episode.ts). */
  tokens?: boolean;
  /**
   * A shard's share: only groups first .. first + count - 1 are played, numbered, seeded and
   * sampled as in the whole batch; no filter runs (the whole batch's comes from settleBatch).
   */
  groupRange?: { first: number; count: number };
}

export interface BatchHooks extends TurnHooks {
  onEpisode?: (record: EpisodeRecord) => void;
  /** A group finished: its episodes in env-id order, scored when the score is group-local. */
  onGroup?: (group: number, episodes: EpisodeRecord[]) => void;
  /** Awaited before a group starts, so a slow consumer can hold the batch back. */
  admitGroup?: (group: number) => Promise<void>;
  /** Groups played at once (default: all). */
  maxConcurrentGroups?: number;
  /** Keep every episode's turns in the result (default true); false keeps memory flat. */
  retainEpisodes?: boolean;
  /** Bytes a group's remote env answered, as each answer arrives (before it is parsed). */
  onEnvBytes?: (group: number, bytes: number) => void;
}

/** RAGEN's train seed schedule: base + step × env_groups (val always uses its base). */
export function trainBatchSeed(base: number, step: number, envGroups: number): number {
  return base + step * envGroups;
}

/** The tag of every group, in RAGEN's env-id order. */
export function groupTags(request: BatchRequest): string[] {
  return request.tags.flatMap(({ tag, groups }) => Array.from({ length: groups }, () => tag));
}

/**
 * The episodes of group `group`: group_size members on seed + group, env ids contiguous; a
 * remote env's answers are charged to `charge` as they arrive.
 */
export function groupEpisodes(
  registry: EnvRegistry,
  request: BatchRequest,
  group: number,
  tag: string,
  charge?: ChargeBytes,
): Episode[] {
  const resolved = registry.tag(tag);
  return Array.from(
    { length: request.groupSize },
    (_, member) =>
      new Episode(
        resolved,
        group * request.groupSize + member,
        group,
        request.seed + group,
        request.episode,
        charge,
      ),
  );
}

let batchCounter = 0;

/** What a policy may know of the episode at `turn`. */
export function episodeView(episode: Episode, request: BatchRequest, turn: number): EpisodeView {
  return {
    tag: episode.tag.spec.tag,
    envId: episode.envId,
    turn,
    actionNames: episode.actionNames,
    actionsThisTurn: Math.min(request.episode.max_actions_per_turn, episode.actionsLeft),
    actionSep: request.episode.action_sep,
    think: request.episode.think,
    solve: () => episode.solve(),
  };
}

/** Chat mode: each turn sends the history as chat messages, fitted to the context window. */
async function playChatEpisode(
  episode: Episode,
  request: BatchRequest,
  policy: Policy,
  hooks: BatchHooks,
  affinity: string,
): Promise<void> {
  let dropped = 0;
  let known: KnownPrompt | null = null;
  const history = new HistoryJson();
  await playTurns(episode, hooks, async (turn) => {
    // A second pass only when the engine's context length fell under the turn (a restart).
    for (let pass = 0; ; pass++) {
      let messages: ChatMessage[];
      let maxTokens = request.sampling.max_tokens;
      let tokens: number | null = null;
      let limit: number | undefined;
      if (policy.meter) {
        limit = policy.meter.limit;
        const fitted = await fitContext(
          episode,
          request,
          policy.meter,
          dropped,
          affinity,
          hooks.signal,
          known,
          history,
        );
        if (fitted === null) {
          episode.endContextFull();
          return;
        }
        ({ messages, maxTokens, dropped, tokens } = fitted);
      } else {
        messages = episode.promptMessages();
      }
      let response: PolicyResponse;
      try {
        response = await policy.generate({
          messages,
          prefill: episode.prefill,
          sampling: {
            ...request.sampling,
            max_tokens: maxTokens,
            seed: requestSeed(request.seed, episode.envId, turn),
          },
          episode: episodeView(episode, request, turn),
          affinity,
          signal: hooks.signal,
          fittedTo: limit,
          history,
        });
      } catch (error) {
        if (error instanceof ContextLimitChanged && pass === 0) continue;
        throw error;
      }
      await turnSlot();
      const applied = episode.applyResponse(episode.prefill + response.text, response.finishReason, {
        prompt: response.promptTokens,
        completion: response.completionTokens,
        dropped,
        ambiguousSplit: response.ambiguousSplit,
        versions: response.versions,
      });
      // Only a remote env's turn is a promise: an in-process one costs no extra microtask.
      if (applied instanceof Promise) await applied;
      // The engine's own count of this prompt is exact; without one, the count or bound it was fitted on.
      const exact = response.promptTokens ?? tokens;
      known = exact === null ? null : { messages, tokens: exact };
      return;
    }
  });
}

/** A prompt sent earlier in the episode and an upper bound on its tokens (usually the exact count). */
export interface KnownPrompt {
  messages: readonly ChatMessage[];
  tokens: number;
}

/**
 * An upper bound on the tokens of `messages` (plus the same prefill), from a known prompt they
 * extend: its tokens, plus the UTF-8 bytes of every added message (a byte-level BPE token is at
 * least one byte) and TEMPLATE_TOKENS_PER_MESSAGE each. Null when `messages` does not start
 * with the known prompt's messages unchanged (a window slid, turns were dropped).
 */
export function extendedPromptBound(known: KnownPrompt, messages: readonly ChatMessage[]): number | null {
  const old = known.messages;
  if (messages.length <= old.length) return null;
  for (let i = 0; i < old.length; i++) {
    if (messages[i].role !== old[i].role || messages[i].content !== old[i].content) return null;
  }
  return known.tokens + messagesBound(messages.slice(old.length));
}

/**
 * The prompt for the episode's next turn, shortened until prompt + max_tokens fits the engine's
 * context. "turns" drops the oldest complete turns (never an observation without its
 * response); when only the current turn is left, max_tokens is lowered, but not below
 * minResponseTokens. "ragen" applies RAGEN's rule. Null: not even the current turn fits.
 * `dropped` starts at the previous turn's count, since a history only grows. In "turns" mode a
 * prompt that extends the `known` one is not counted when an upper bound on its tokens already
 * fits with the full max_tokens (`tokens` is then that bound); near the limit it is counted.
 */
async function fitContext(
  episode: Episode,
  request: BatchRequest,
  meter: PromptMeter,
  dropped: number,
  affinity: string,
  signal: AbortSignal | undefined,
  known: KnownPrompt | null,
  history: HistoryJson,
): Promise<{ messages: ChatMessage[]; maxTokens: number; dropped: number; tokens: number } | null> {
  const count = (messages: readonly ChatMessage[]) =>
    meter.count(messages, episode.prefill, signal, affinity, history);
  const wanted = request.sampling.max_tokens;
  const floor = Math.min(wanted, request.minResponseTokens ?? 32);
  const fits = (tokens: number) => (tokens + wanted <= meter.limit ? wanted : meter.limit - tokens);
  if (request.episode.truncation === "ragen") {
    const full = episode.promptMessages();
    // RAGEN counts the template with its generation prompt but without the "<think>" prefill.
    const cut = await ragenTruncate(full, (m) => meter.count(m, "", signal, affinity), meter.limit);
    const tokens = await count(cut.messages);
    const room = fits(tokens);
    return room >= floor
      ? { messages: cut.messages, maxTokens: room, dropped: cut.droppedTurns, tokens }
      : null;
  }
  for (let drop = dropped; ; drop++) {
    const messages = episode.promptMessages(drop);
    if (drop === dropped && known !== null) {
      const bound = extendedPromptBound(known, messages);
      // The exact count could only say the same: it is ≤ the bound, so the full max_tokens fits.
      if (bound !== null && bound + wanted <= meter.limit) {
        meter.fittedByBound?.();
        return { messages, maxTokens: wanted, dropped: drop, tokens: bound };
      }
    }
    const tokens = await count(messages);
    const room = fits(tokens);
    if (room === wanted) return { messages, maxTokens: wanted, dropped: drop, tokens };
    if (drop >= episode.turnIndex) {
      return room >= floor ? { messages, maxTokens: room, dropped: drop, tokens } : null;
    }
  }
}

/** Checks the request, then plays it. */
export async function runBatch(
  registry: EnvRegistry,
  request: BatchRequest,
  policy: Policy,
  hooks: BatchHooks = {},
): Promise<BatchResult> {
  validateBatchRequest(request);
  const refusal = policyRefusal(registry, request, policy);
  if (refusal) throw new RangeError(refusal);
  const tokenEngine = request.tokens ? policy.tokenEngine?.() : null;
  if (request.tokens && !tokenEngine) {
    throw new RangeError(
      `token mode needs a remote engine (vLLM or llama.cpp, after preflight); the ${policy.name} policy has no tokens`,
    );
  }
  return playBatch(registry, request, policy, tokenEngine ?? null, hooks);
}

/**
 * Plays a request its caller has checked as runBatch does (the server's admission, which words
 * its refusals for the wire); `tokenEngine` renders and samples a token-mode batch.
 */
export async function playBatch(
  registry: EnvRegistry,
  request: BatchRequest,
  policy: Policy,
  tokenEngine: TokenEngine | null,
  hooks: BatchHooks = {},
): Promise<BatchResult> {
  const tags = groupTags(request);
  const retain = hooks.retainEpisodes ?? true;
  const batchId = ++batchCounter;
  const context = emptyTally();
  const byGroup: EpisodeRecord[][] = [];
  const first = request.groupRange?.first ?? 0;
  const end = request.groupRange ? first + request.groupRange.count : tags.length;
  let next = first;
  const notStarted: number[] = [];
  const playGroups = async (): Promise<void> => {
    while (next < end) {
      const group = next++;
      if (!hooks.signal?.aborted) await hooks.admitGroup?.(group);
      // Cancelled before it started: nothing is built or played for it (a cancelled 4096-group
      // rollout costs what it played, not its size).
      if (hooks.signal?.aborted) {
        notStarted.push(group);
        continue;
      }
      await playGroup(group);
    }
  };
  // Its own frame, so a worker's registers do not hold a finished group's records (and their
  // token arrays) while it plays the next one.
  const playGroup = async (group: number): Promise<void> => {
    // Resets are synchronous: a slot before each group keeps a wave of workers (or of
    // rollouts) starting together from holding everyone else's frames and requests.
    await turnSlot();
    const charge = hooks.onEnvBytes;
    const episodes = groupEpisodes(
      registry,
      request,
      group,
      tags[group],
      charge && ((bytes) => charge(group, bytes)),
    );
    const records = await Promise.all(
      episodes.map(async (episode) => {
        const affinity = `${batchId}:${episode.envId}`;
        let tokens: TokenLog | null = null;
        try {
          if (episode.ready) await episode.ready;
          if (request.tokens)
            tokens = await playTokenEpisode(episode, request, tokenEngine!, hooks, affinity);
          else await playChatEpisode(episode, request, policy, hooks, affinity);
        } finally {
          episode.close();
        }
        policy.forget?.(affinity);
        const record = episode.record();
        // Versions as the turns have them: once a version the trainer named was played.
        if (tokens) record.tokens = tokens.record(record.turns.some((t) => t.version !== undefined));
        tallyContext(context, record);
        hooks.onEpisode?.(record);
        return record;
      }),
    );
    if (groupLocalScores(request)) scoreEpisodes(records, request);
    hooks.onGroup?.(group, records);
    byGroup[group] = retain ? records : records.map(slimRecord);
  };
  const played = end - first;
  const workers = Math.min(hooks.maxConcurrentGroups ?? played, played);
  await Promise.all(Array.from({ length: workers }, playGroups));
  return settleBatch(byGroup.flat(), request, notStarted, context);
}

/**
 * What metrics and the filter need of an episode: a stream's episodes went out in their group
 * frames, and keeping their turns and token logs until the batch ends held every token array
 * of the rollout (the young generation then copied them, and memory grew with the rollout).
 */
function slimRecord(record: EpisodeRecord): EpisodeRecord {
  const { tokens: _tokens, ...rest } = record;
  return { ...rest, turns: [], final_state: "" };
}

/**
 * A played batch's outcome from its episodes in env-id order: scores (when they depend on more
 * than the group), the filter's verdict (none for a shard's share) and RAGEN's metrics;
 * `context` is tallyContext's count over the episodes. The server's `verdict` frame runs this on
 * the episodes shards played, so a sharded batch is judged as one server judges it.
 */
export function settleBatch(
  records: EpisodeRecord[],
  request: BatchRequest,
  notStarted: number[],
  context: Record<string, number>,
): BatchResult {
  const tags = groupTags(request);
  if (!groupLocalScores(request)) scoreEpisodes(records, request);

  const groups = groupResults(records, request);
  notStarted.sort((a, b) => a - b);
  for (const g of notStarted) {
    const env_ids = Array.from({ length: request.groupSize }, (_, m) => g * request.groupSize + m);
    groups[g] = {
      group_id: g,
      tag: tags[g],
      seed: request.seed + g,
      env_ids,
      score: null,
      kept: false,
      failed: true,
    };
  }
  const scored = groups.filter((g) => !g.failed);
  const metrics: Record<string, number> = tagMetrics(records, request);
  // RAGEN filters training batches only; validation keeps every group.
  if (request.mode === "val" || isNoOpFilter(request) || request.groupRange) {
    for (const g of scored) g.kept = true;
  } else if (scored.length > 0) {
    const filter = runGroupFilter(
      scored.map((g) => g.env_ids.map((id) => records[id].score)),
      request.filter,
    );
    scored.forEach((g, i) => {
      g.score = filter.scores[i];
      g.kept = filter.kept.includes(i);
    });
    Object.assign(metrics, filter.metrics);
  }
  const failed = records.filter((r) => r.failure !== null).length;
  metrics["rollgym/failed_episodes"] = failed;
  Object.assign(metrics, context);
  return { mode: request.mode, seed: request.seed, episodes: records, groups, metrics, failed, notStarted };
}

/** The context tally of `records` (what playBatch counts as its episodes end). */
export function contextTally(records: readonly EpisodeRecord[]): Record<string, number> {
  const tally = emptyTally();
  for (const record of records) tallyContext(tally, record);
  return tally;
}

function emptyTally() {
  return {
    "rollgym/context_shortened_turns": 0,
    "rollgym/context_full_episodes": 0,
    "rollgym/ambiguous_splits": 0,
    "rollgym/prompt_drift_requests": 0,
    "rollgym/template_drift_episodes": 0,
    "rollgym/logprobs_missing": 0,
  };
}

/**
 * Counts how often the context window shortened a prompt or ended an episode, reasoning splits
 * that could not be undone, and (token mode) prompt and template drift.
 */
function tallyContext(tally: ReturnType<typeof emptyTally>, record: EpisodeRecord): void {
  for (const t of record.turns) {
    if (t.context_dropped) tally["rollgym/context_shortened_turns"]++;
    if (t.ambiguous_split) tally["rollgym/ambiguous_splits"]++;
  }
  if (record.end_reason === "context_full") tally["rollgym/context_full_episodes"]++;
  if (record.tokens) {
    tally["rollgym/prompt_drift_requests"] += record.tokens.prompt_drift;
    tally["rollgym/logprobs_missing"] += record.tokens.logprobs_missing;
    if (record.tokens.template_drift !== null) tally["rollgym/template_drift_episodes"]++;
  }
}

/** RAGEN's shortcut: top_p 1.0 with include_zero returns the batch unchanged (base.yaml's default). */
function isNoOpFilter(request: BatchRequest): boolean {
  const f = request.filter;
  return f.strategy === "top_p" && f.value >= 1 && f.include_zero;
}

/** Reject requests RAGEN would run into NaN or an assertion with. */
export function validateBatchRequest(request: BatchRequest): void {
  if (
    request.mode === "train" &&
    request.groupSize < 2 &&
    request.filter.metric === "reward_variance" &&
    !isNoOpFilter(request)
  ) {
    throw new RangeError(
      "rollout_filter_metric reward_variance ranks groups by their reward std, which needs group_size >= 2 (got 1); use group_size >= 2 or turn the filter off (top_p, value 1.0)",
    );
  }
  if (request.tokens && request.episode.context_window_mode !== "full") {
    throw new RangeError(
      `token mode keeps one growing token sequence per episode, which needs agent_proxy.context_window_mode full (got ${request.episode.context_window_mode})`,
    );
  }
}

/** Why `policy` cannot play the request's tags as it claims to (an oracle without a solver), or null. */
export function policyRefusal(registry: EnvRegistry, request: BatchRequest, policy: Policy): string | null {
  return policy.cannotPlay?.(request.tags.map((t) => registry.tag(t.tag))) ?? null;
}

/** Scores that depend only on the group itself can be final as soon as the group is. */
export function groupLocalScores(request: BatchRequest): boolean {
  return (
    request.useTurnScores ||
    request.normalization.method === "identity" ||
    request.normalization.grouping === "state"
  );
}

/** RAGEN's trajectory scores, written into the records. */
function scoreEpisodes(records: EpisodeRecord[], request: BatchRequest): void {
  const scores = request.useTurnScores
    ? records.map((r) => r.turns.reduce((sum, t) => Math.fround(sum + Math.fround(t.reward)), 0))
    : episodeScores(
        records.map((r) => ({
          groupId: r.group_id,
          tag: r.tag,
          reward: request.binaryReward ? Number(r.success) : r.reward,
          penalty: r.penalty,
        })),
        request.normalization.grouping,
        request.normalization.method,
      );
  records.forEach((r, i) => {
    r.score = scores[i];
  });
}

function groupResults(records: readonly EpisodeRecord[], request: BatchRequest): GroupResult[] {
  const groups: GroupResult[] = [];
  for (const r of records) {
    let g = groups[r.group_id];
    if (!g) {
      g = {
        group_id: r.group_id,
        tag: r.tag,
        seed: r.seed,
        env_ids: [],
        score: null,
        kept: false,
        failed: false,
      };
      groups[r.group_id] = g;
    }
    g.env_ids.push(r.env_id);
    if (r.failure !== null) g.failed = true;
  }
  return groups.slice(
    0,
    request.tags.reduce((n, t) => n + t.groups, 0),
  );
}

/**
 * RAGEN's per-tag metrics: each episode metric summed over the tag's episodes and divided by
 * the tag's episode count, pass@group_size per group, and the means of non-zero values.
 * Failed episodes are left out (and counted in rollgym/failed_episodes) rather than scored 0.
 */
export function tagMetrics(records: readonly EpisodeRecord[], request: BatchRequest): Record<string, number> {
  const prefix = request.mode === "train" ? "train" : "val-env";
  const values = new Map<string, number[]>();
  const groupSuccess = new Map<number, boolean>();
  for (const r of records) {
    if (r.failure !== null) continue;
    groupSuccess.set(r.group_id, (groupSuccess.get(r.group_id) ?? false) || r.success);
  }
  for (const r of records) {
    if (r.failure !== null) continue;
    const metrics = {
      ...r.metrics,
      [`${r.tag}/pass@${request.groupSize}`]: groupSuccess.get(r.group_id) ? 1 : 0,
    };
    for (const [key, value] of Object.entries(metrics)) {
      const list = values.get(key) ?? [];
      list.push(value);
      values.set(key, list);
    }
  }
  const out: Record<string, number> = {};
  const finished = new Map<string, number>();
  for (const r of records) if (r.failure === null) finished.set(r.tag, (finished.get(r.tag) ?? 0) + 1);
  for (const key of [...values.keys()].sort()) {
    const list = values.get(key)!;
    const [tag, ...rest] = key.split("/");
    out[`${prefix}/${key}`] = list.reduce((a, b) => a + b, 0) / (finished.get(tag) ?? list.length);
    const nonZero = list.filter((v) => v !== 0);
    if (nonZero.length > 0) {
      out[`${prefix}/${tag}/non-zero/${rest.join("/")}`] =
        nonZero.reduce((a, b) => a + b, 0) / nonZero.length;
    }
  }
  return out;
}
