// One episode as RAGEN's env-state manager and context manager play it: the inference prompt
// for the next turn, and applying a model turn (parse, map actions, step within the budget,
// penalties, rewards and RAGEN's bookkeeping).

import { pyNumberRepr } from "../../envs/pyrepr.ts";
import type { ResolvedTag } from "../../envs/registry.ts";
import type { AsyncEnv, ChargeBytes, StepInfo, StepResult } from "../../envs/types.ts";
import { ActionBudget } from "../../envs/wrappers/action-budget.ts";
import type { ContextWindowMode, EpisodeValues } from "../../protocol/settings.ts";
import { messageOf } from "../errors/boundary.ts";
import type { ChatMessage } from "../llm/chat.ts";
import type { TurnVersions } from "../llm/versions.ts";
import type { EndReason, EpisodeRecord, TurnRecord } from "../record/episode-record.ts";
import { mapActions, parseResponse } from "./parse.ts";
import { formatInstruction, INVALID_ACTION_WARNING, systemPrompt, turnBlock } from "./prompt.ts";

/**
 * How episodes are played: EPISODE's settings by wire name (protocol/settings.ts; a request may
 * set them), and the rest by the name of their configuration key.
 */
export interface EpisodeSettings extends EpisodeValues {
  action_sep: string;
  context_window_mode: ContextWindowMode;
  /** Entries of history shown in windowed modes; -1 for all. */
  max_context_window: number;
  format_penalty: number;
  /** Prompts name the env type's default vocabulary (a prompt option, with no configuration key). */
  ragenDefaultVocabulary?: boolean;
  /**
   * How a prompt too long for the engine's context is shortened: "turns" drops the oldest
   * complete turns; "ragen" applies RAGEN's _apply_max_length. Default "turns".
   */
  truncation?: "turns" | "ragen";
}

/** Token counts a turn reports with its response. */
export interface TurnUsage {
  prompt?: number;
  completion?: number;
  cached?: number;
  dropped?: number;
  ambiguousSplit?: boolean;
  /** The weight versions at dispatch and completion, when the policy stamps them. */
  versions?: TurnVersions;
}

/** A turn between parsing and its record: the actions to step and what the steps gave so far. */
interface PendingTurn {
  raw: string;
  finishReason: string;
  usage: TurnUsage;
  parsed: ReturnType<typeof parseResponse>;
  penalised: boolean;
  noValidAction: boolean;
  /** Actions left of the budget when the turn began (its record shows them). */
  actionsLeft: number;
  /** Action ids (or texts, for free-text envs) within the action budget. */
  allowed: (number | string)[];
  executed: string[];
  reward: number;
  rawReward: number;
  info: Record<string, number | boolean>;
  envDone: boolean;
}

export class Episode {
  readonly tag: ResolvedTag;
  readonly envId: number;
  readonly groupId: number;
  readonly seed: number;
  private readonly settings: EpisodeSettings;
  /** The tag's env within the tag's action budget (max_actions_per_traj). */
  private readonly env: ActionBudget<AsyncEnv>;
  private readonly system: string;
  private readonly integerRewards: boolean;
  private readonly turns: TurnRecord[] = [];
  /** Each turn's weight versions, when the policy stamps them (see record()). */
  private readonly turnVersions: (TurnVersions | undefined)[] = [];
  private state: string;
  private terminated = false;
  private truncated = false;
  private penalty = 0;
  private warnNext = false;
  private failure: string | null = null;
  private contextFull = false;
  private budgetSpent = false;
  /**
   * Settles when the env's reset has answered (null for an env that answered at once): await it
   * before the first prompt. A reset that fails fails the episode; the promise never rejects.
   */
  readonly ready: Promise<void> | null = null;

  constructor(
    tag: ResolvedTag,
    envId: number,
    groupId: number,
    seed: number,
    settings: EpisodeSettings,
    charge?: ChargeBytes,
  ) {
    this.tag = tag;
    this.envId = envId;
    this.groupId = groupId;
    this.seed = seed;
    this.settings = settings;
    this.env = new ActionBudget(tag.open(charge), tag.spec.max_actions_per_traj);
    const first = this.env.reset(seed);
    if (typeof first === "string") this.state = first;
    else {
      this.state = "";
      this.ready = first.then(
        (text) => {
          this.state = text;
        },
        (error) => this.fail(`reset: ${messageOf(error)}`),
      );
    }
    this.integerRewards = tag.type.integerRewards;
    this.system = systemPrompt(tag, {
      think: settings.think,
      actionSep: settings.action_sep,
      ragenDefaultVocabulary: settings.ragenDefaultVocabulary,
    });
  }

  /** Still needs model turns: not done, within max_turn, not failed. */
  get active(): boolean {
    return (
      !this.terminated &&
      this.failure === null &&
      !this.contextFull &&
      this.turns.length < this.settings.max_turn
    );
  }

  /** Stopped by a failure (inference gave up, cancelled). */
  get failed(): boolean {
    return this.failure !== null;
  }

  get turnIndex(): number {
    return this.turns.length;
  }

  /** The latest recorded turn. */
  get lastTurn(): TurnRecord | undefined {
    return this.turns[this.turns.length - 1];
  }

  get actionNames(): readonly string[] {
    return this.env.actionNames;
  }

  get actionsLeft(): number {
    return this.env.actionsLeft;
  }

  /** Actions of the recorded turns (a turn a remote failure cut short has no record). */
  private get numActions(): number {
    return this.turns.reduce((n, t) => n + t.actions.length, 0);
  }

  /** The prefill the generation prompt ends with. */
  get prefill(): string {
    return this.settings.think ? "<think>" : "<answer>";
  }

  solve(): string[] | null {
    return this.tag.solve(this.env)?.actions ?? null;
  }

  /**
   * The inference prompt for the next turn, in the configured context-window mode, leaving out
   * at least the `drop` oldest finished turns (each with its state, response and reward).
   */
  promptMessages(drop = 0): ChatMessage[] {
    const offset = this.historyOffset(drop);
    const entries = this.turns.length + 1;
    if (this.settings.context_window_mode === "single_turn") return this.singleTurnMessages(offset);
    const messages: ChatMessage[] = [
      { role: "system", content: this.system },
      { role: "user", content: "" },
    ];
    for (let i = offset; i < this.turns.length; i++) {
      const t = this.turns[i];
      messages[messages.length - 1].content += this.block(i + 1, t.state, t.actions_left, t.warned);
      messages.push({ role: "assistant", content: t.response });
      messages.push({ role: "user", content: `Reward:\n${t.reward_text}\n` });
    }
    messages[messages.length - 1].content += this.block(entries, this.state, this.actionsLeft, this.warnNext);
    return messages;
  }

  /**
   * The last message of promptMessages(): the user message token mode appends after a turn,
   * without rendering the earlier turns' states again only to leave them out.
   */
  lastPromptMessage(): ChatMessage {
    if (this.settings.context_window_mode === "single_turn") return this.promptMessages().at(-1)!;
    const last = this.turns.at(-1);
    const reward =
      last !== undefined && this.historyOffset(0) < this.turns.length ? `Reward:\n${last.reward_text}\n` : "";
    const entries = this.turns.length + 1;
    return {
      role: "user",
      content: reward + this.block(entries, this.state, this.actionsLeft, this.warnNext),
    };
  }

  /** The first finished turn the next prompt shows, leaving out at least `drop` (RAGEN's history window). */
  private historyOffset(drop: number): number {
    const { context_window_mode, max_context_window } = this.settings;
    // History entries: one per finished turn plus the current state (RAGEN's history list).
    const entries = this.turns.length + 1;
    const window =
      context_window_mode !== "full" && max_context_window > 0 && entries > max_context_window
        ? max_context_window
        : entries;
    return Math.min(Math.max(entries - window, drop), this.turns.length);
  }

  /**
   * Apply the model's turn: `raw` is the prefill followed by the generated text. The turn is
   * recorded at once when the env answers at once; a remote env's steps make it a promise (which
   * rejects, leaving no turn, when a step fails).
   */
  applyResponse(raw: string, finishReason: string, usage: TurnUsage = {}): TurnRecord | Promise<TurnRecord> {
    if (!this.active) throw new Error(`episode ${this.envId} is not active`);
    const { max_actions_per_turn, action_sep, think, format_penalty } = this.settings;
    const parsed = parseResponse(raw, {
      think,
      actionSep: action_sep,
      maxActionsPerTurn: max_actions_per_turn,
    });
    let actions: (number | string)[];
    let penalised: boolean;
    if (this.env.textActions) {
      // Free-text actions: every parsed action goes to the env as written.
      actions = parsed.parsed;
      penalised = actions.length === 0;
    } else {
      const mapped = mapActions(parsed.parsed, this.env.actionNames);
      actions = mapped.ids;
      penalised = mapped.formatPenalty;
    }
    if (penalised) this.penalty += format_penalty;
    const turn: PendingTurn = {
      raw,
      finishReason,
      usage,
      parsed,
      penalised,
      noValidAction: actions.length === 0,
      actionsLeft: this.actionsLeft,
      allowed: actions.slice(0, this.actionsLeft),
      executed: [],
      reward: 0,
      rawReward: 0,
      info: {},
      envDone: false,
    };
    return this.stepFrom(turn, 0);
  }

  /** Steps the turn's actions from `next` on, awaiting only an env that answers later. */
  private stepFrom(turn: PendingTurn, next: number): TurnRecord | Promise<TurnRecord> {
    for (let k = next; k < turn.allowed.length; k++) {
      const result = this.env.step(turn.allowed[k]);
      if (result instanceof Promise)
        return result.then((r) =>
          this.took(turn, k, r) ? this.finishTurn(turn) : this.stepFrom(turn, k + 1),
        );
      if (this.took(turn, k, result)) break;
    }
    return this.finishTurn(turn);
  }

  /** Adds one step's result to the turn; true when the env ended the episode. */
  private took(turn: PendingTurn, k: number, result: StepResult): boolean {
    turn.reward += result.reward;
    turn.rawReward += typeof result.info.raw_reward === "number" ? result.info.raw_reward : 0;
    turn.info = { ...(result.info as StepInfo) };
    const action = turn.allowed[k];
    turn.executed.push(typeof action === "string" ? action : this.env.actionNames[action - 1]);
    turn.envDone = result.terminated || result.truncated;
    return turn.envDone;
  }

  private finishTurn(pending: PendingTurn): TurnRecord {
    const { info, executed, reward, usage } = pending;
    info.raw_reward = pending.rawReward;
    if (pending.noValidAction) info.manager_invalid_action = true;

    const turn: TurnRecord = {
      turn: this.turns.length + 1,
      state: this.state,
      actions_left: pending.actionsLeft,
      warned: this.warnNext,
      raw_response: pending.raw,
      response: pending.parsed.llmResponse,
      parsed: pending.parsed.parsed,
      actions: executed,
      reward,
      // RAGEN's turn reward starts as the int 0, so it prints as an int until a float is added.
      reward_text: pyNumberRepr(reward, executed.length === 0 || this.integerRewards),
      format_penalty: pending.penalised,
      info,
      finish_reason: pending.finishReason,
    };
    if (usage.prompt !== undefined) turn.prompt_tokens = usage.prompt;
    if (usage.completion !== undefined) turn.completion_tokens = usage.completion;
    if (usage.cached !== undefined) turn.cached_tokens = usage.cached;
    if (usage.dropped) turn.context_dropped = usage.dropped;
    if (usage.ambiguousSplit) turn.ambiguous_split = true;
    this.turns.push(turn);
    this.turnVersions.push(usage.versions);

    this.state = this.env.render();
    this.warnNext = pending.noValidAction;
    if (pending.envDone) {
      this.terminated = true;
      this.truncated = info.success !== true;
    } else if (this.env.endedByBudget) {
      this.terminated = true;
      this.truncated = true;
      this.budgetSpent = true;
    }
    return turn;
  }

  /** Releases the env (a remote env's session); called once the episode is over or abandoned. */
  close(): void {
    this.env.close?.();
  }

  /** Not even the current turn fits the engine's context: end like max_turn, scored, truncated. */
  endContextFull(): void {
    if (!this.active) throw new Error(`episode ${this.envId} is not active`);
    this.contextFull = true;
    this.truncated = true;
  }

  /** Stop the episode with a reason; it is reported as failed, never as a silent zero. The first reason stays. */
  fail(reason: string): void {
    this.failure ??= reason;
  }

  record(): EpisodeRecord {
    const reward = this.turns.reduce((sum, t) => sum + t.reward, 0);
    const success = this.terminated && !this.truncated;
    return {
      env_id: this.envId,
      group_id: this.groupId,
      tag: this.tag.spec.tag,
      seed: this.seed,
      turns: this.versionedTurns(),
      final_state: this.state,
      num_actions: this.numActions,
      terminated: this.terminated,
      truncated: this.truncated,
      success,
      reward,
      penalty: this.penalty,
      score: Math.fround(Math.fround(reward) + Math.fround(this.penalty)),
      metrics: this.metrics(success),
      failure: this.failure,
      end_reason: this.endReason(),
    };
  }

  /**
   * The turns, each with its weight versions once any turn was played under a version the
   * trainer named (ordinal > 0); before that every version is the initial 0 and the field is
   * left out, so records of runs without a trainer stay as they were.
   */
  private versionedTurns(): TurnRecord[] {
    const named = this.turnVersions.some((v) => v !== undefined && (v.dispatch > 0 || v.completion > 0));
    if (!named) return this.turns;
    return this.turns.map((turn, i) => ({
      ...turn,
      version: { ...(this.turnVersions[i] ?? { dispatch: 0, completion: 0 }) },
    }));
  }

  private endReason(): EndReason {
    if (this.failure !== null) return "failed";
    if (this.contextFull) return "context_full";
    if (this.budgetSpent) return "action_budget";
    if (this.terminated) return "done";
    return "max_turn";
  }

  /** RAGEN's get_rollout_states metrics for this episode (pass@k is added per group). */
  private metrics(success: boolean): Record<string, number> {
    const tag = this.tag.spec.tag;
    const out: Record<string, number> = {
      [metricKey(tag, "success")]: success ? 1 : 0,
      [metricKey(tag, "num_actions")]: this.numActions,
    };
    const sums = new Map<string, number>();
    for (const t of this.turns) {
      const info = t.info;
      for (const key of Object.keys(info)) {
        if (key === "success") continue;
        sums.set(key, (sums.get(key) ?? 0) + Number(info[key]));
      }
    }
    if (sums.has("raw_reward")) out[metricKey(tag, "episodic_return")] = sums.get("raw_reward")!;
    if (this.turns.length > 0)
      for (const [key, sum] of sums) out[metricKey(tag, key)] = sum / this.turns.length;
    return out;
  }

  private block(turn: number, state: string, actionsLeft: number, warned: boolean): string {
    return turnBlock({
      turn,
      state,
      actionsLeft,
      maxTokens: this.tag.spec.max_tokens,
      think: this.settings.think,
      warnInvalid: warned,
    });
  }

  /** RAGEN's single_turn prompt: one user message summarising the window's earlier turns. */
  private singleTurnMessages(offset: number): ChatMessage[] {
    const shown = this.turns.slice(offset);
    let content = "";
    if (shown.length > 0) {
      content +=
        `Summary: ${this.turns.length} step(s) completed so far. ` +
        `Showing the last ${shown.length} turn(s) with state/action/reward details. Recent turns:\n---\n`;
      shown.forEach((t, i) => {
        const n = offset + i + 1;
        content += `Turn ${n} State:\n${t.state}\nTurn ${n} Action: ${t.response}\nTurn ${n} Reward: ${t.reward_text}\n---\n`;
      });
    }
    const warning = this.warnNext ? INVALID_ACTION_WARNING : "";
    content +=
      `${content ? "\n" : ""}${shown.length > 0 ? "Current Turn " : ""}(Turn ${this.turns.length + 1}):\n` +
      `State:\n${this.state}\n${warning}You have ${this.actionsLeft} actions left. Always output: ` +
      `${formatInstruction(this.settings.think)} with no extra text. Strictly follow this format. ` +
      `Max response length: ${this.tag.spec.max_tokens} words (tokens).\n`;
    return [
      { role: "system", content: this.system },
      { role: "user", content },
    ];
  }
}

/** Metric names per tag, made once: every episode of a tag names the same few. */
const metricKeys = new Map<string, Map<string, string>>();
/** Names kept per tag (an env with more info keys has the rest made each time), and tags kept. */
const METRIC_KEYS_KEPT = 256;
const METRIC_TAGS_KEPT = 256;

/** "tag/key". */
function metricKey(tag: string, key: string): string {
  let keys = metricKeys.get(tag);
  if (keys === undefined) {
    if (metricKeys.size >= METRIC_TAGS_KEPT) metricKeys.clear();
    keys = new Map();
    metricKeys.set(tag, keys);
  }
  let name = keys.get(key);
  if (name === undefined) {
    name = `${tag}/${key}`;
    if (keys.size < METRIC_KEYS_KEPT) keys.set(key, name);
  }
  return name;
}
