// `rollgym serve`: the rollout server for trainers (WebSocket /v1/rollouts, /healthz,
// /metrics, /v1/envs) and the web page at /. Without --llm it serves with the built-in policy.

import { readFileSync, statSync } from "node:fs";
import { resolve as absolute } from "node:path";
import { MAX_TRAINER_TOKEN_LENGTH } from "../../protocol/messages.ts";
import { LIMITS, type LimitName } from "../../protocol/settings.ts";
import { buildServer, type RollgymServer, type ShutdownReport } from "../server/app.ts";
import { limitOptions } from "../server/limits.ts";
import { normalOrigin } from "../server/origin.ts";
import { type FlagSpec, parseArgs, parseInteger, UsageError } from "./args.ts";
import { CONFIG_FLAGS, isOverride, reportLoaded, setup } from "./context.ts";
import { io, say } from "./io.ts";
import { whenParentGone } from "./lifeline.ts";
import { checkPolicyKeys, readyPolicy } from "./rollout.ts";
import { applyTunedRuntime, RUNTIME_VARIABLE, runtimeLines, tunedRuntimeAsked } from "./runtime.ts";

/** The flags that set a limit: each a spelling of its configuration key, in whole numbers. */
const LIMIT_FLAGS: Record<string, LimitName> = {
  "max-buffered-groups": "max_buffered_groups",
  "resume-grace": "resume_grace_s",
  "max-update": "max_update_s",
  "max-connections": "max_connections",
  "max-connections-per-address": "max_connections_per_address",
};

/** A limit's flag: its help ends with the key and default, its range is the table's. */
function limitFlag(name: LimitName, arg: string, what: string): FlagSpec {
  const { key } = LIMITS[name]["x-config"];
  return { kind: "value", arg, help: `${what} (${key}, ${LIMITS[name].default})` };
}

/** The whole numbers a limit's schema allows (an exclusive minimum of 0 allows 1 and up). */
function integerRange(name: LimitName): [number, number] {
  const schema = LIMITS[name] as unknown as { minimum?: number; exclusiveMinimum?: number; maximum: number };
  return [schema.minimum ?? Math.floor(schema.exclusiveMinimum ?? 0) + 1, schema.maximum];
}

/** --port's default, which the image exposes (Dockerfile, deploy/kubernetes). */
export const DEFAULT_PORT = 8787;

/** --shutdown-deadline's default: a container's grace period must cover it (deploy/kubernetes). */
export const SHUTDOWN_DEADLINE_S = 30;

export const SERVE_FLAGS: Record<string, FlagSpec> = {
  host: { kind: "value", arg: "HOST", help: "interface to listen on (default 127.0.0.1)" },
  port: { kind: "value", arg: "N", help: `port (default ${DEFAULT_PORT}; 0 picks a free one)` },
  token: {
    kind: "value",
    arg: "T",
    help: "bearer token clients must present (default $ROLLGYM_TOKEN; none = open); visible in ps, prefer --token-file",
  },
  "token-file": {
    kind: "value",
    arg: "FILE",
    help: "read the bearer token from FILE (its first line), so it never shows in ps",
  },
  "trainer-token": {
    kind: "value",
    arg: "T",
    help: 'the token a hello with role "trainer" must carry (default $ROLLGYM_TRAINER_TOKEN; none = the role is anyone\'s); visible in ps, prefer --trainer-token-file',
  },
  "trainer-token-file": {
    kind: "value",
    arg: "FILE",
    help: "read the trainer token from FILE (its first line)",
  },
  "allow-origin": {
    kind: "value",
    arg: "ORIGIN",
    repeat: true,
    help: "a browser origin (https://host[:port]) that may use the server besides its own page, e.g. a proxy in front of it",
  },
  "allow-host": {
    kind: "value",
    arg: "NAME",
    repeat: true,
    help: "a host name browsers may reach the server by, besides IP addresses, localhost and this machine's name",
  },
  llm: { kind: "value", arg: "URL", help: "OpenAI-compatible base URL; comma-separated for replicas" },
  model: { kind: "value", arg: "M", help: "model served at --llm" },
  policy: { kind: "value", arg: "NAME", help: "built-in policy when no --llm: oracle|random" },
  "max-buffered-groups": limitFlag(
    "max_buffered_groups",
    "N",
    "finished groups a stream rollout holds for a slow client",
  ),
  "group-concurrency": {
    kind: "value",
    arg: "N",
    help: "groups of one rollout played at once (rollgym.limits.group_concurrency, 64)",
  },
  "resume-grace": limitFlag("resume_grace_s", "S", "seconds a dropped session waits for its client"),
  "max-update": limitFlag(
    "max_update_s",
    "S",
    "seconds a weight update may stay open before the engines resume at the old version",
  ),
  "shutdown-deadline": {
    kind: "value",
    arg: "S",
    help: `seconds SIGTERM lets rollouts finish (${SHUTDOWN_DEADLINE_S})`,
  },
  "max-connections": limitFlag("max_connections", "N", "WebSocket connections at once"),
  "max-connections-per-address": limitFlag(
    "max_connections_per_address",
    "N",
    "WebSocket connections at once from one address",
  ),
  share: {
    kind: "value",
    arg: "DIR",
    help: "a directory whose episode files the web page may list and replay",
  },
  "tuned-runtime": {
    kind: "switch",
    help: `re-execute in place with the measured memory settings (jemalloc, V8 flags), unless under IPC, cluster or an inspector; also $${RUNTIME_VARIABLE}=tuned`,
  },
  "print-runtime": {
    kind: "switch",
    help: "print those settings as Dockerfile, systemd and shell lines for these serve options, and exit",
  },
  ...CONFIG_FLAGS,
};

/**
 * Before `serve` runs in this process (main.ts): the tuned runtime, when asked for, which may
 * re-execute the process in place. Bad arguments are left for serveCommand to report.
 */
export function tuneServeProcess(argv: readonly string[]): void {
  let asked: boolean;
  try {
    const args = parseArgs("serve", argv, SERVE_FLAGS);
    asked = !args.switches.has("print-runtime") && tunedRuntimeAsked(args.switches.has("tuned-runtime"));
  } catch {
    return;
  }
  if (asked) applyTunedRuntime();
}

export async function serveCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("serve", argv, SERVE_FLAGS);
  // Checked here too, so a bad value is a usage error (main.ts's look before running ignores it).
  tunedRuntimeAsked(args.switches.has("tuned-runtime"));
  if (args.switches.has("print-runtime")) {
    io().stdout.write(runtimeLines(argv.filter((arg) => arg !== "--print-runtime")));
    return;
  }
  for (const p of args.positionals) {
    if (!isOverride(p))
      throw new UsageError(
        `serve: unexpected argument ${JSON.stringify(p)} (overrides look like key=value or ~key)`,
      );
  }
  const overrides = [...args.positionals];
  if (args.values.has("llm")) overrides.push(`rollgym.llm.base_url=${args.values.get("llm")}`);
  if (args.values.has("model")) overrides.push(`rollgym.llm.model=${args.values.get("model")}`);
  if (args.values.has("policy")) overrides.push(`rollgym.policy.name=${args.values.get("policy")}`);
  if (args.values.has("group-concurrency"))
    overrides.push(`rollgym.limits.group_concurrency=${args.values.get("group-concurrency")}`);
  // The limit flags are spellings of their configuration keys, checked here so a bad value names the flag.
  for (const [flag, name] of Object.entries(LIMIT_FLAGS)) {
    const value = args.values.get(flag);
    if (value !== undefined)
      overrides.push(
        `${LIMITS[name]["x-config"].key}=${parseInteger(`--${flag}`, value, ...integerRange(name))}`,
      );
  }
  const { loaded, registry } = await setup(args, overrides);
  const { config } = loaded;
  checkPolicyKeys(loaded);
  const port = parseInteger("--port", args.values.get("port") ?? String(DEFAULT_PORT), 0, 65535);
  const host = args.values.get("host") ?? "127.0.0.1";
  const seconds = (flag: string, fallback: number) =>
    parseInteger(`--${flag}`, args.values.get(flag) ?? String(fallback), 0, 86_400);
  const token = secretFrom("token", "ROLLGYM_TOKEN", args.values);
  const trainerToken = secretFrom("trainer-token", "ROLLGYM_TRAINER_TOKEN", args.values);
  if (trainerToken !== null && trainerToken.length > MAX_TRAINER_TOKEN_LENGTH)
    throw new UsageError(
      `--trainer-token: ${trainerToken.length} characters; a hello carries at most ${MAX_TRAINER_TOKEN_LENGTH}`,
    );
  const browsers = {
    allowOrigins: args.lists.get("allow-origin") ?? [],
    allowHosts: args.lists.get("allow-host") ?? [],
  };
  try {
    browsers.allowOrigins.forEach(normalOrigin);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }

  const shutdownDeadlineMs = seconds("shutdown-deadline", SHUTDOWN_DEADLINE_S) * 1000;
  const share = args.values.get("share") ?? null;
  if (share !== null && !statSync(share, { throwIfNoEntry: false })?.isDirectory())
    throw new UsageError(`--share: ${JSON.stringify(share)} is not a directory`);
  const policy = await readyPolicy(config);
  reportLoaded(loaded);
  const server = await buildServer({
    config,
    registry,
    policy,
    token,
    trainerToken,
    browsers,
    share: share === null ? null : absolute(share),
    shutdownDeadlineMs,
    // Every limit, from its configuration key (rollgym.server.*, rollgym.limits.*; the flags above set them).
    ...limitOptions(config),
    groupConcurrency: config.rollgym.limits.group_concurrency,
    logger: { level: process.env.ROLLGYM_LOG_LEVEL ?? "warn" },
  });
  let url: string;
  try {
    url = await server.listen(port, host);
  } catch (error) {
    throw new UsageError(
      `cannot listen on ${host}:${port}: ${error instanceof Error ? error.message : error}`,
    );
  }
  const ws = url.replace(/^http/, "ws");
  const using = config.rollgym.llm.base_url
    ? `model ${config.rollgym.llm.model} at ${config.rollgym.llm.base_url}`
    : `built-in ${config.rollgym.policy.name} policy`;
  io().stdout.write(
    `rollgym serving on ${url} (the web page; ${ws}/v1/rollouts) with the ${using}${token ? ", token required" : ""}${trainerToken ? ", trainer token required" : ""}\n`,
  );
  // Readiness for a parent on an IPC channel, the way PM2's wait_ready expects it.
  process.send?.("ready");
  await untilStopped(server);
}

/**
 * A secret: --NAME, else the first line of --NAME-file, else $VARIABLE, else none (the bearer
 * token and the trainer token alike).
 */
function secretFrom(name: string, variable: string, values: ReadonlyMap<string, string>): string | null {
  const flag = values.get(name);
  const file = values.get(`${name}-file`);
  if (flag !== undefined && file !== undefined)
    throw new UsageError(`--${name} and --${name}-file: give one of them`);
  let token = flag ?? process.env[variable] ?? null;
  if (file !== undefined) {
    try {
      token = readFileSync(file, "utf8").split(/\r?\n/)[0].trim();
    } catch (error) {
      throw new UsageError(
        `--${name}-file: cannot read ${JSON.stringify(file)}: ${(error as Error).message}`,
      );
    }
  }
  if (token === "")
    throw new UsageError(
      `${file !== undefined ? `--${name}-file` : `--${name}`}: an empty token would let anyone in; omit it to serve without one`,
    );
  return token;
}

/**
 * Serves until a signal: the first SIGTERM or SIGINT drains (running rollouts finish until the
 * deadline), a second cancels what is running at once (verdicts still go out), a third exits
 * without waiting. A SIGINT within a second of the previous signal is the same Ctrl-C: the
 * terminal sends it to the server and `npm start` passes its own copy on. Started through npm
 * (`npx rollgym serve`) or by a parent that asks for it, the server also drains when the process
 * that started it dies (lifeline.ts).
 */
async function untilStopped(server: RollgymServer): Promise<void> {
  let signals = 0;
  let last = 0;
  // Settles with the shutdown the first signal starts (a second one only hurries it).
  let started: (report: Promise<ShutdownReport>) => void = () => {};
  const stopped = new Promise<ShutdownReport>((resolve) => {
    started = resolve;
  });
  const stop = (why: string, reason = `server received ${why}`) => {
    signals++;
    if (signals === 1)
      say(`${why}: finishing running rollouts, then closing (signal again to cancel them now)`);
    else if (signals === 2) say(`${why} again: cancelling running rollouts now, then closing`);
    else {
      say(`${why} a third time: exiting now`);
      process.exit(1);
    }
    started(server.shutdown(reason));
  };
  const onSignal = (signal: NodeJS.Signals) => {
    const now = performance.now();
    const repeat = signal === "SIGINT" && signals > 0 && now - last < 1_000;
    last = now;
    if (!repeat) stop(signal);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  whenParentGone(() => {
    // Like a first signal, never counted as a second one.
    if (signals === 0) stop("the process that started it exited", "the server's parent process exited");
  });
  try {
    const { cancelled, dropped } = await stopped;
    const parts = [
      cancelled ? `cancelled ${cancelled} running rollout(s)` : "",
      dropped ? `dropped ${dropped} connection(s) that did not answer the close` : "",
    ].filter(Boolean);
    say(`closed${parts.length ? `: ${parts.join(", ")}` : ""}`);
  } finally {
    whenParentGone(null);
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
    // A copy of the signal may still be on its way (npm passes Ctrl-C on to the server it
    // started, late on a busy machine); it must not kill a process that has already closed.
    for (const signal of ["SIGTERM", "SIGINT"] as const)
      if (!process.listeners(signal).includes(ignoreLateSignal)) process.on(signal, ignoreLateSignal);
  }
}

function ignoreLateSignal(): void {}
