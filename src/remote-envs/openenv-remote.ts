// The `openenv` env type: a tag whose episodes run on remote OpenEnv servers (docs/openenv.md
// "rollgym hosting OpenEnv environments"). Each episode opens its own /ws session, resets it
// with its group's seed and sends each parsed action as `{ACTION_FIELD: text}`; the
// observation's OBSERVATION_FIELD (or OBSERVATION_TEMPLATE over its fields) is the text the
// prompt shows, and SUCCESS says which steps succeed (observation-rules.ts). Reset and step
// answer through promises (the asynchronous half of envs/types.ts's contract); failures on the
// wire end the episode with an OpenEnvFailure naming the reason.
import { setTimeout as sleep } from "node:timers/promises";
import { integerIn, numberIn, oneOf, overlayConfig, stringMap } from "../../envs/config.ts";
import type { AsyncEnv, ChargeBytes, EnvType, StepInfo, StepResult } from "../../envs/types.ts";
import { EnvConfigError, EnvUsageError } from "../../envs/types.ts";
import { isPlainObject } from "../../protocol/plain-object.ts";
import { withoutSecrets } from "../../protocol/secret-urls.ts";
import {
  parseSuccessRule,
  parseTemplate,
  renderTemplate,
  type SuccessRule,
  stepSucceeded,
  type TemplatePart,
} from "./observation-rules.ts";
import { type Server, SessionPool } from "./openenv-pool.ts";
import {
  type ObservationAnswer,
  OpenEnvCapacity,
  OpenEnvFailure,
  OpenEnvRefused,
  OpenEnvSession,
} from "./openenv-session.ts";

/** What the seed check steps with in a free-text env, unless seed_check_actions says. */
const TEXT_PROBES = ["50", "25", "75"];

export interface OpenEnvConfig {
  /** Base URL of the server (OpenEnv's EnvClient base_url: http://host:port[/path]); or `urls`. */
  url: string | null;
  /** Base URLs of several servers of one image; episodes spread over them. */
  urls: string[] | null;
  /** Sessions each server holds at once (OpenEnv's max_concurrent_envs; its default is 1). */
  max_sessions: number;
  /** The action model's text field: a step sends `{action_field: TEXT}`. */
  action_field: string;
  /** The observation field whose text is the state the prompt shows (unless observation_template). */
  observation_field: string;
  /** The state the prompt shows, from several fields: text with `{field}` placeholders, or null. */
  observation_template: string | null;
  /** When a step counts as a success (observation-rules.ts); auto: info.success, else done with reward > 0. */
  success: string;
  /** The observation field listing the episode's action names (null or absent: free text). */
  actions_field: string | null;
  /** Action names for the system prompt and for mapping answers, when the server sends none. */
  actions: string[] | null;
  /** Grid symbols for the system prompt ("symbol: meaning"), as in-process grid envs give. */
  grid_vocab: Record<string, string> | null;
  /** Seconds a reset or step may take before the episode fails with openenv_timeout. */
  step_timeout_s: number;
  /** Seconds to open a session before the episode fails with openenv_connect. */
  connect_timeout_s: number;
  /**
   * Seconds an episode waits out the server's CAPACITY_REACHED before it fails with
   * openenv_capacity (and how long a queue behind sessions that nothing steps may stand still).
   */
  capacity_wait_s: number;
  /**
   * Play the first episode's seed twice (reset, then a few steps) and refuse an env whose two
   * plays differ; false plays such an env anyway, with a warning.
   */
  check_seed: boolean;
  /** The actions the seed check steps with (null: up to 3 listed action names, or 50, 25, 75 as text). */
  seed_check_actions: string[] | null;
  /** The largest answer a session takes (bytes); a larger one fails its episode with openenv_garbage. */
  max_answer_bytes: number;
}

/** The default answer cap: the server's own max_frame_bytes for client frames. */
export const DEFAULT_MAX_ANSWER_BYTES = 1 << 20;

function defaults(): OpenEnvConfig {
  return {
    url: null,
    urls: null,
    max_sessions: 1,
    action_field: "action",
    observation_field: "text",
    observation_template: null,
    success: "auto",
    actions_field: "actions",
    actions: null,
    grid_vocab: null,
    step_timeout_s: 60,
    connect_timeout_s: 10,
    capacity_wait_s: 60,
    check_seed: true,
    seed_check_actions: null,
    max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
  };
}

/** OpenEnv's EnvClient rule: http → ws, https → wss, no scheme → ws, trailing "/" dropped, then /ws. */
export function sessionUrl(field: string, base: unknown): string {
  if (typeof base !== "string" || base.trim() === "")
    throw new EnvConfigError(field, `${JSON.stringify(base)} is not a base URL (http://host:port[/path])`);
  let url = base.trim().replace(/\/+$/, "");
  if (/^https:\/\//i.test(url)) url = `wss://${url.slice(8)}`;
  else if (/^http:\/\//i.test(url)) url = `ws://${url.slice(7)}`;
  else if (!/^wss?:\/\//i.test(url)) url = `ws://${url}`;
  const query = url.indexOf("?");
  const [path, search] = query < 0 ? [url, ""] : [url.slice(0, query).replace(/\/+$/, ""), url.slice(query)];
  try {
    new URL(path);
  } catch {
    throw new EnvConfigError(field, `${JSON.stringify(base)} is not a base URL (http://host:port[/path])`);
  }
  return `${path}/ws${search}`;
}

const name = (field: string, value: unknown): string => {
  if (typeof value !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(value))
    throw new EnvConfigError(field, `${JSON.stringify(value)} is not a field name (letters, digits, _)`);
  return value;
};

const names = (field: string, value: unknown): string[] | null => {
  if (value === null) return null;
  if (!Array.isArray(value) || value.length === 0 || value.some((v) => typeof v !== "string" || v === ""))
    throw new EnvConfigError(field, `${JSON.stringify(value)} is not a non-empty list of action names`);
  return [...value];
};

const urlList = (field: string, value: unknown): string[] | null => {
  if (value === null) return null;
  if (!Array.isArray(value) || value.length === 0)
    throw new EnvConfigError(field, `${JSON.stringify(value)} is not a non-empty list of base URLs`);
  for (const [i, v] of value.entries()) sessionUrl(`${field}[${i}]`, v);
  return [...value];
};

/** Each resolved tag's sessions, by its config object (one pool per tag). */
const pools = new WeakMap<OpenEnvConfig, SessionPool>();

function poolOf(config: OpenEnvConfig): SessionPool {
  let pool = pools.get(config);
  if (!pool) {
    const bases = config.urls ?? [config.url!];
    pool = new SessionPool({
      urls: bases.map((b) => sessionUrl("url", b)),
      maxSessions: config.max_sessions,
      downMs: config.connect_timeout_s * 1000,
    });
    pools.set(config, pool);
    if (!config.check_seed)
      process.emitWarning(
        `the openenv env at ${bases.map(withoutSecrets).join(", ")} plays without its seed check (check_seed: false): ` +
          "if it ignores the seed, a group's episodes each play a different episode and their advantages compare different problems",
        { code: "ROLLGYM_SEED_UNCHECKED" },
      );
  }
  return pool;
}

/** The sessions a resolved openenv tag holds (for status and tests). */
export function openenvPool(config: object): SessionPool | null {
  return pools.get(config as OpenEnvConfig) ?? null;
}

/** One episode on a remote OpenEnv server. */
export class RemoteEnv implements AsyncEnv {
  private readonly config: OpenEnvConfig;
  private readonly pool: SessionPool;
  private session: OpenEnvSession | null = null;
  private server: Server | null = null;
  private names: string[] | null = null;
  private text = "";
  private ended = false;
  private closed = false;
  private readonly charge: ChargeBytes | undefined;
  private readonly template: TemplatePart[] | null;
  private readonly success: SuccessRule;

  constructor(config: OpenEnvConfig, charge?: ChargeBytes) {
    this.config = config;
    this.template = parseTemplate("observation_template", config.observation_template);
    this.success = parseSuccessRule("success", config.success);
    this.pool = poolOf(config);
    this.charge = charge;
  }

  get actionNames(): readonly string[] {
    return this.names ?? [];
  }

  get textActions(): boolean {
    return this.names === null;
  }

  get done(): boolean {
    return this.ended;
  }

  render(): string {
    return this.text;
  }

  async reset(seed: number): Promise<string> {
    if (this.closed) throw new EnvUsageError("the remote env was closed");
    this.release();
    let answer = await this.openAndReset(seed);
    if (await this.checkSeed(seed, answer))
      answer = await this.ask({ type: "reset", data: { seed } }, "reset");
    // Closed while the session opened (an env session disposed, a batch cancelled): let it go.
    if (this.closed) {
      this.release();
      throw new EnvUsageError("the remote env was closed");
    }
    this.take(answer);
    this.ended = false;
    return this.text;
  }

  /** The registry's OrderEnforcing has checked the order and the action (envs/wrappers). */
  async step(action: number | string): Promise<StepResult> {
    // Before a reset, after a failed request or close() there is no session to step.
    if (this.session === null)
      throw new EnvUsageError("the remote env has no session: not reset yet, failed or closed");
    const text = typeof action === "string" ? action : this.actionNames[action - 1];
    const answer = await this.ask({ type: "step", data: { [this.config.action_field]: text } }, "step");
    const { observation } = answer;
    this.take(answer);
    this.ended = answer.done;
    const truncated = observation.truncated === true;
    const reward = answer.reward ?? 0;
    const info = stepInfo(observation.info);
    info.success = stepSucceeded(this.success, { observation, reward, done: answer.done, truncated });
    return {
      observation: this.text,
      reward,
      terminated: answer.done && !truncated,
      truncated: answer.done && truncated,
      info,
    };
  }

  close(): void {
    this.closed = true;
    this.release();
  }

  /**
   * Opens a session on the least loaded server and resets it. Waiting in rollgym's own queue
   * never counts against capacity_wait_s; the wait starts with the server's first
   * CAPACITY_REACHED that rollgym's own sessions there do not explain.
   */
  private async openAndReset(seed: number): Promise<ObservationAnswer> {
    const waitMs = this.config.capacity_wait_s * 1000;
    let giveUp: number | null = null;
    for (let pause = 100; ; ) {
      const server = await this.pool.acquire(waitMs);
      if (server === null)
        throw new OpenEnvFailure(
          "openenv_capacity",
          `no session of the tag's ${this.pool.counts.limit} (max_sessions over its addresses) came free, and none answered, within capacity_wait_s (${this.config.capacity_wait_s} s): the episodes holding them are not being stepped (an env_open with more episodes than sessions?)`,
        );
      if (this.closed) {
        this.pool.release(server);
        throw new EnvUsageError("the remote env was closed");
      }
      this.server = server;
      try {
        this.session = await OpenEnvSession.connect(server.url, this.config.connect_timeout_s * 1000, {
          maxAnswerBytes: this.config.max_answer_bytes,
          charge: this.charge,
        });
      } catch (error) {
        this.release();
        // Another address of the same image may be up: the episode goes there instead.
        if (this.pool.hasAlternative(server)) {
          this.pool.markDown(server);
          continue;
        }
        throw error;
      }
      try {
        return await this.ask({ type: "reset", data: { seed } }, "reset");
      } catch (error) {
        if (!(error instanceof OpenEnvCapacity)) throw error;
        // Full of rollgym's own sessions: the episode waits for one of them, in the queue.
        const ours = this.pool.full(server, { maxSessions: error.maxSessions });
        this.server = null;
        this.release();
        if (ours) continue;
        giveUp ??= Date.now() + waitMs;
        if (Date.now() + pause > giveUp)
          throw new OpenEnvFailure(
            "openenv_capacity",
            `${error.detail}; waited ${this.config.capacity_wait_s} s (capacity_wait_s) for a session`,
          );
        await sleep(pause);
        pause = Math.min(pause * 2, 2000);
      }
    }
  }

  /**
   * The first episode of the tag plays its seed twice: reset, then the same few steps. An env
   * that ignores the seed (its reset takes none, and OpenEnv drops it without a word) plays two
   * different episodes, often from the same first observation (a hidden number, a shuffled
   * deck), and then every episode of the tag fails saying so. Whether it checked (the session
   * then needs a fresh reset).
   */
  private async checkSeed(seed: number, first: ObservationAnswer): Promise<boolean> {
    if (!this.config.check_seed) return false;
    // Another episode's check under way: its verdict holds for this one too, unless it failed
    // on the wire (undefined), which says nothing: then this episode checks.
    let problem: string | null | undefined;
    while (this.pool.seedVerdict !== null) {
      problem = await this.pool.seedVerdict;
      if (problem !== undefined) break;
    }
    const checking = problem === undefined;
    if (checking) {
      const probe = this.seedProbe(seed, first).catch((error) => {
        if (!(error instanceof OpenEnvFailure)) throw error;
        throw new OpenEnvFailure(error.reason, `${error.detail} (in the seed check: check_seed)`);
      });
      this.pool.seedVerdict = probe.catch(() => {
        this.pool.seedVerdict = null;
        return undefined;
      });
      problem = await probe;
    }
    if (problem) {
      this.release();
      throw new OpenEnvFailure("openenv_seed_ignored", problem);
    }
    return checking;
  }

  /** Two plays of `seed` from `first` (already reset): why they differ, or null. */
  private async seedProbe(seed: number, first: ObservationAnswer): Promise<string | null> {
    const url = this.session!.url;
    const actions = this.config.seed_check_actions ?? this.listedNames(first)?.slice(0, 3) ?? TEXT_PROBES;
    const one = await this.probeSteps(first, actions);
    const again = await this.ask({ type: "reset", data: { seed } }, "reset");
    const two = await this.probeSteps(again, actions);
    const at = one.findIndex((seen, i) => seen !== two[i]);
    if (at < 0 && one.length === two.length) return null;
    const where = at === 0 ? "after the reset" : `after step ${at} (${JSON.stringify(actions[at - 1])})`;
    return (
      `the seed check (check_seed) failed: two plays of ${url} with seed ${seed} (reset, then ` +
      `${actions.map((a) => JSON.stringify(a)).join(", ")}) gave different observations ${where}: the env ` +
      "ignores the seed (an OpenEnv env whose reset takes no seed drops it without a word) or is not " +
      "deterministic, and a group's episodes must all play the same episode (seed_check_actions " +
      "chooses the steps; check_seed: false plays it anyway)"
    );
  }

  /** What `first` and each of `actions` after it show (up to the episode's end), as text. */
  private async probeSteps(first: ObservationAnswer, actions: readonly string[]): Promise<string[]> {
    const seen = [JSON.stringify(first)];
    for (const action of actions) {
      try {
        const answer = await this.ask({ type: "step", data: { [this.config.action_field]: action } }, "step");
        seen.push(JSON.stringify(answer));
        if (answer.done) break;
      } catch (error) {
        // A refused step is an answer too (the same refusal both times for a seeded env).
        if (!(error instanceof OpenEnvRefused)) throw error;
        seen.push(error.message);
      }
    }
    return seen;
  }

  /** The action names an observation lists, or the configured ones. */
  private listedNames(answer: ObservationAnswer): string[] | null {
    const listed =
      this.config.actions_field === null ? undefined : answer.observation[this.config.actions_field];
    return Array.isArray(listed) && listed.every((n) => typeof n === "string")
      ? (listed as string[])
      : this.config.actions;
  }

  /** One request on this episode's session; a failure on the wire ends the session. */
  private async ask(message: Record<string, unknown>, what: string): Promise<ObservationAnswer> {
    try {
      const answer = await this.session!.request(message, what, this.config.step_timeout_s * 1000);
      this.pool.progressed();
      return answer;
    } catch (error) {
      // A full server's refusal gives its slot back through the pool's full() instead.
      if (error instanceof OpenEnvFailure && !(error instanceof OpenEnvCapacity)) this.release();
      throw error;
    }
  }

  /** The observation's text and action names become the episode's. */
  private take(answer: ObservationAnswer): void {
    const { observation } = answer;
    const missing = (what: string) => {
      const url = this.session?.url;
      this.release();
      return new OpenEnvFailure(
        "openenv_garbage",
        `${url}'s observation has no ${what}; its fields: ${Object.keys(observation).join(", ") || "none"}`,
      );
    };
    const { template } = this;
    if (template) {
      const rendered = renderTemplate(template, observation);
      if ("missing" in rendered)
        throw missing(`field ${JSON.stringify(rendered.missing)} (observation_template)`);
      this.text = rendered.text;
    } else {
      const field = this.config.observation_field;
      const text = observation[field];
      // null: an Optional field sent as None (Reasoning Gym's question once answered).
      if (typeof text !== "string" && text !== null)
        throw missing(`text field ${JSON.stringify(field)} (observation_field)`);
      this.text = text ?? "";
    }
    this.names = this.listedNames(answer);
  }

  private release(): void {
    const closed = this.session?.close();
    this.session = null;
    if (this.server) this.pool.release(this.server, closed);
    this.server = null;
  }
}

/** The observation's info as a step's: its numbers and booleans, with the three facts RAGEN reads. */
function stepInfo(info: unknown): StepInfo {
  const out: StepInfo = { success: false, action_is_effective: true, action_is_valid: true };
  if (isPlainObject(info))
    for (const [key, value] of Object.entries(info))
      if (typeof value === "number" || typeof value === "boolean") out[key] = value;
  return out;
}

export const openenv: EnvType<OpenEnvConfig> = {
  name: "openenv",
  description: "An environment on remote OpenEnv servers, played over their /ws sessions.",
  integerRewards: false,
  defaults,
  resolveConfig(overrides) {
    const config = overlayConfig("openenv", defaults(), overrides, {
      url: (field, value) => {
        if (value !== null) sessionUrl(field, value);
        return value;
      },
      urls: urlList,
      max_sessions: integerIn(1, 1_000_000),
      action_field: name,
      observation_field: name,
      // Checked here, kept as written (the tag's config is shown); each episode parses them.
      observation_template: (field, value) => {
        parseTemplate(field, value);
        return value;
      },
      success: (field, value) => {
        parseSuccessRule(field, value);
        return value;
      },
      actions_field: (field, value) => (value === null ? null : name(field, value)),
      actions: names,
      grid_vocab: (field, value) => (value === null ? null : stringMap(null)(field, value)),
      step_timeout_s: numberIn(0.001, 86_400),
      connect_timeout_s: numberIn(0.001, 3_600),
      capacity_wait_s: numberIn(0, 86_400),
      check_seed: oneOf(true, false),
      seed_check_actions: (field, value) => {
        if (value === null) return null;
        if (
          !Array.isArray(value) ||
          value.length === 0 ||
          value.length > 16 ||
          value.some((v) => typeof v !== "string")
        )
          throw new EnvConfigError(field, `${JSON.stringify(value)} is not a list of 1 to 16 action texts`);
        return [...value];
      },
      max_answer_bytes: integerIn(1024, 256 << 20),
    });
    if ((config.url === null) === (config.urls === null))
      throw new EnvConfigError(
        config.url === null ? "url" : "urls",
        config.url === null
          ? "is required: the OpenEnv server's base URL (http://host:port[/path]), or urls: [several of one image]"
          : "give url or urls, not both",
      );
    return config;
  },
  create(config) {
    throw new EnvUsageError(
      `this tag's env runs on ${config.url ?? config.urls!.join(", ")} (env_type openenv) and answers ` +
        "asynchronously; it can be rolled out and checked (`rollgym envs check`), not stepped in process",
    );
  },
  open: (config, charge) => new RemoteEnv(config, charge),
  vocabulary: (config) => ({ gridVocab: config.grid_vocab, actionNames: config.actions }),
};
