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
  OpenEnvSession,
} from "./openenv-session.ts";

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
  /** Seconds an episode waits out CAPACITY_REACHED before it fails with openenv_capacity. */
  capacity_wait_s: number;
  /** Reset the first episode twice with its seed and refuse an env whose two resets differ. */
  check_seed: boolean;
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
    const answer = await this.openAndReset(seed);
    await this.checkSeed(seed, answer);
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

  /** Opens a session on the least loaded server and resets it, waiting out a full server. */
  private async openAndReset(seed: number): Promise<ObservationAnswer> {
    const giveUp = Date.now() + this.config.capacity_wait_s * 1000;
    for (let pause = 100; ; pause = Math.min(pause * 2, 2000)) {
      const server = await this.pool.acquire(Math.max(0, giveUp - Date.now()));
      if (server === null)
        throw new OpenEnvFailure(
          "openenv_capacity",
          `no session of the tag's ${this.pool.counts.limit} (max_sessions over its addresses) came free within capacity_wait_s (${this.config.capacity_wait_s} s)`,
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
        this.pool.full(server);
        this.server = null;
        this.release();
        if (Date.now() + pause > giveUp)
          throw new OpenEnvFailure(
            "openenv_capacity",
            `${error.detail}; waited ${this.config.capacity_wait_s} s (capacity_wait_s) for a session`,
          );
        await sleep(pause);
      }
    }
  }

  /**
   * The first episode of the tag resets twice with its seed: an env that ignores the seed (its
   * reset takes none, and OpenEnv drops it without a word) gives two different episodes, and
   * then every episode of the tag fails saying so.
   */
  private async checkSeed(seed: number, first: ObservationAnswer): Promise<void> {
    if (!this.config.check_seed) return;
    let problem: string | null;
    if (this.pool.seedVerdict === null) {
      const url = this.session!.url;
      const probe = this.ask({ type: "reset", data: { seed } }, "reset").then((second) =>
        JSON.stringify(second.observation) === JSON.stringify(first.observation)
          ? null
          : `two resets of ${url} with seed ${seed} gave different observations: the env ignores ` +
            "the seed (an OpenEnv env whose reset takes no seed drops it without a word) or is not " +
            "deterministic, and a group's episodes must all play the same episode (set check_seed: false " +
            "to play it anyway)",
      );
      // A probe that failed on the wire says nothing: the next episode checks again.
      this.pool.seedVerdict = probe.catch(() => {
        this.pool.seedVerdict = null;
        return null;
      });
      problem = await probe;
    } else problem = await this.pool.seedVerdict;
    if (problem !== null) throw new OpenEnvFailure("openenv_seed_ignored", problem);
  }

  /** One request on this episode's session; a failure on the wire ends the session. */
  private async ask(message: Record<string, unknown>, what: string): Promise<ObservationAnswer> {
    try {
      return await this.session!.request(message, what, this.config.step_timeout_s * 1000);
    } catch (error) {
      if (error instanceof OpenEnvFailure) this.release();
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
    const listed = this.config.actions_field === null ? undefined : observation[this.config.actions_field];
    this.names =
      Array.isArray(listed) && listed.every((n) => typeof n === "string")
        ? (listed as string[])
        : this.config.actions;
  }

  private release(): void {
    this.session?.close();
    this.session = null;
    if (this.server) this.pool.release(this.server);
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
