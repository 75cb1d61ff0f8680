// Registries with a tag hosted remotely (env_type openenv), built as a user's custom_envs entry.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { WebSocketServer } from "ws";
import type { EnvRegistry, TagSpec } from "../../envs/registry.ts";
import { buildRegistry } from "../../src/cli/build-registry.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { applyCustomEnvs } from "../../src/config/registry.ts";
import type { Policy } from "../../src/llm/policy.ts";

type SpecFields = Partial<Pick<TagSpec, "max_actions_per_traj" | "env_instruction" | "max_tokens">>;

/**
 * The default registry plus `tag`: env_type openenv with `envConfig`, and the action budget,
 * instruction and max_tokens of the in-process tag `like` (or `spec`'s).
 */
export async function remoteRegistry(
  tag: string,
  like: string,
  envConfig: Record<string, unknown>,
  spec: SpecFields = {},
): Promise<EnvRegistry> {
  const registry = await buildRegistry(defaultConfig());
  addRemoteTag(registry, tag, like, envConfig, spec);
  return registry;
}

/** Adds `tag` to `registry` as a user's custom_envs entry would (see remoteRegistry). */
export function addRemoteTag(
  registry: EnvRegistry,
  tag: string,
  like: string,
  envConfig: Record<string, unknown>,
  spec: SpecFields = {},
): void {
  const config = defaultConfig();
  const base = registry.tag(like).spec;
  config.custom_envs = {
    [tag]: {
      env_type: "openenv",
      max_actions_per_traj: base.max_actions_per_traj,
      env_instruction: base.env_instruction,
      max_tokens: base.max_tokens,
      ...spec,
      env_config: envConfig,
    },
  } as never;
  applyCustomEnvs(registry, config);
}

/** Where Python finds rollgym_envs and its examples (and the test envs beside this suite). */
export function pythonPath(root: string): string {
  return [`${root}/python`, `${root}/python/examples`, `${root}/test/openenv`].join(":");
}

/** A Python OpenEnv provider started from `args`, once it prints its first base URL. */
export async function startPythonProvider(
  root: string,
  args: readonly string[],
): Promise<{ child: ChildProcess; base: string }> {
  const child = spawn("/usr/bin/python3", [...args], {
    cwd: root,
    env: { ...process.env, PYTHONPATH: pythonPath(root), PYTHONDONTWRITEBYTECODE: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += chunk;
  });
  const lines = createInterface({ input: child.stdout! });
  const base = await new Promise<string>((resolve, reject) => {
    lines.on("line", (line) => {
      const url = /at (http:\/\/\S+)/.exec(line)?.[1];
      if (url) resolve(url);
    });
    child.once("exit", (code) => reject(new Error(`python3 ${args.join(" ")} exited (${code}): ${stderr}`)));
  });
  return { child, base };
}

/**
 * Bisects 1..100 on the env's "N: higher/lower" hints, one guess a turn; every third episode
 * first answers something that is not a number (the env's -0.1 and unchanged state).
 */
export function bisectPolicy(): Policy {
  const ranges = new Map<string, [number, number]>();
  return {
    name: "bisect",
    async generate(request) {
      const key = request.affinity!;
      let [lo, hi] = ranges.get(key) ?? [1, 100];
      const hint = [...request.messages.at(-1)!.content.matchAll(/(\d+): (higher|lower)/g)].at(-1);
      if (hint) [lo, hi] = hint[2] === "higher" ? [Number(hint[1]) + 1, hi] : [lo, Number(hint[1]) - 1];
      ranges.set(key, [lo, hi]);
      const answer =
        request.episode.turn === 0 && request.episode.envId % 3 === 0 ? "banana" : String((lo + hi) >> 1);
      return {
        text: `Bisecting ${lo}..${hi}.</think><answer>${answer}</answer>`,
        finishReason: "stop",
        attempts: 1,
      };
    },
    forget: (affinity) => ranges.delete(affinity),
  };
}

/** How a FakeOpenEnv misbehaves. */
export type FakeFault =
  | { kind: "none" }
  /** Never answers the step numbered `at` (1-based) of any episode. */
  | { kind: "hang"; at: number }
  /** Answers the step numbered `at` with text that is not JSON. */
  | { kind: "garbage"; at: number }
  /** Resets ignore the seed (an OpenEnv env whose reset takes none). */
  | { kind: "no_seed" }
  /** Holds at most `sessions` sessions; more get CAPACITY_REACHED and are closed. */
  | { kind: "capacity"; sessions: number }
  /**
   * Resets ignore the seed but show the same first observation (as GuessNumber's "I am thinking
   * of a number"); later observations show the hidden number each reset drew.
   */
  | { kind: "hidden_seed" };

/**
 * A small OpenEnv server in Node: "Walk", whose episode at seed s shows "seed s, step n" and
 * ends after 5 steps of "Go" (reward 1 each; "Stay" 0). Misbehaves as `fault` says.
 */
export class FakeOpenEnv {
  readonly wss: WebSocketServer;
  /** Sessions open now, and the most ever open at once. */
  open = 0;
  most = 0;
  /** Connections answered CAPACITY_REACHED. */
  refused = 0;
  /** Most sessions with a step in progress at once. */
  busiest = 0;
  private resets = 0;
  private stepping = 0;

  /** `stepMs`: how long each step takes to answer (a healthy but slow env). */
  private constructor(wss: WebSocketServer, fault: FakeFault, stepMs: number) {
    this.wss = wss;
    wss.on("connection", (ws) => {
      if (fault.kind === "capacity" && this.open >= fault.sessions) {
        const data = {
          message: "full",
          code: "CAPACITY_REACHED",
          active_sessions: this.open,
          max_sessions: fault.sessions,
        };
        this.refused++;
        ws.send(JSON.stringify({ type: "error", data }));
        ws.close(1000);
        return;
      }
      this.open++;
      this.most = Math.max(this.most, this.open);
      // As OpenEnv's server: the session ends at the close message, before the socket closes.
      let ended = false;
      const end = () => {
        if (!ended) this.open--;
        ended = true;
      };
      ws.once("close", end);
      let seed = 0;
      let step = 0;
      const observation = (reward: number | null, done: boolean) =>
        JSON.stringify({
          type: "observation",
          data: {
            observation: {
              text:
                fault.kind === "hidden_seed" && step === 0 ? "guess my number" : `seed ${seed}, step ${step}`,
              actions: ["Go", "Stay"],
            },
            reward,
            done,
          },
        });
      ws.on("message", (raw) => {
        const message = JSON.parse(raw.toString()) as { type: string; data?: Record<string, unknown> };
        if (message.type === "close") {
          end();
          return ws.close(1000);
        }
        if (message.type === "reset") {
          seed =
            fault.kind === "no_seed" || fault.kind === "hidden_seed"
              ? ++this.resets
              : Number(message.data?.seed ?? 0);
          step = 0;
          return ws.send(observation(null, false));
        }
        step++;
        if (fault.kind === "hang" && step === fault.at) return;
        if (fault.kind === "garbage" && step === fault.at) return ws.send("}{ this is not OpenEnv");
        const go = message.data?.action === "Go";
        const answer = observation(go ? 1 : 0, step >= 5);
        if (stepMs === 0) return ws.send(answer);
        this.busiest = Math.max(this.busiest, ++this.stepping);
        setTimeout(() => {
          this.stepping--;
          if (ws.readyState === ws.OPEN) ws.send(answer);
        }, stepMs);
      });
    });
  }

  static async start(fault: FakeFault, stepMs = 0): Promise<FakeOpenEnv> {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    await new Promise((resolve) => wss.once("listening", resolve));
    return new FakeOpenEnv(wss, fault, stepMs);
  }

  get base(): string {
    return `http://127.0.0.1:${(this.wss.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    for (const ws of this.wss.clients) ws.terminate();
    await new Promise((resolve) => this.wss.close(resolve));
  }
}

/**
 * A fake OpenEnv server on 127.0.0.1 whose every reset and step gets `answer(message)` (the
 * closing `close` message gets nothing); resolves once it listens, with its base URL.
 */
export async function fakeOpenEnvServer(
  answer: (message: string) => string | Buffer,
): Promise<{ server: WebSocketServer; base: string }> {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  server.on("connection", (ws) =>
    ws.on("message", (data) => {
      const text = data.toString();
      if (!text.includes('"close"')) ws.send(answer(text));
    }),
  );
  await new Promise((resolve) => server.once("listening", resolve));
  return { server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * A config file (for `rollgym serve --config`) adding `tag`: env_type openenv at `base` with
 * `envConfig`, up to 3 actions a trajectory, told to say Up.
 */
export function remoteTagConfigFile(tag: string, base: string, envConfig: Record<string, unknown>): string {
  const file = join(mkdtempSync(join(tmpdir(), "rollgym-remote-tag-")), "config.yaml");
  const spec = { env_type: "openenv", max_actions_per_traj: 3, env_instruction: "Say Up.\n", max_tokens: 50 };
  // YAML reads JSON as it is.
  writeFileSync(
    file,
    JSON.stringify({ custom_envs: { [tag]: { ...spec, env_config: { url: base, ...envConfig } } } }),
  );
  return file;
}
