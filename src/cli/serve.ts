// `rollgym serve`: the rollout server for trainers (WebSocket /v1/rollouts, /healthz,
// /metrics, /v1/envs) and the web page at /. Without --llm it serves with the built-in policy.

import { statSync } from "node:fs";
import { resolve as absolute } from "node:path";
import { buildServer } from "../server/app.ts";
import { type FlagSpec, parseArgs, parseInteger, UsageError } from "./args.ts";
import { CONFIG_FLAGS, isOverride, reportLoaded, setup } from "./context.ts";
import { io, say } from "./io.ts";
import { checkPolicyKeys, readyPolicy } from "./rollout.ts";

export const SERVE_FLAGS: Record<string, FlagSpec> = {
  host: { kind: "value", arg: "HOST", help: "interface to listen on (default 127.0.0.1)" },
  port: { kind: "value", arg: "N", help: "port (default 8787; 0 picks a free one)" },
  token: {
    kind: "value",
    arg: "T",
    help: "bearer token clients must present (default $ROLLGYM_TOKEN; none = open)",
  },
  llm: { kind: "value", arg: "URL", help: "OpenAI-compatible base URL; comma-separated for replicas" },
  model: { kind: "value", arg: "M", help: "model served at --llm" },
  policy: { kind: "value", arg: "NAME", help: "built-in policy when no --llm: oracle|random" },
  "max-buffered-groups": {
    kind: "value",
    arg: "N",
    help: "finished groups a stream rollout holds for a slow client (64)",
  },
  "resume-grace": { kind: "value", arg: "S", help: "seconds a dropped session waits for its client (60)" },
  "shutdown-deadline": { kind: "value", arg: "S", help: "seconds SIGTERM lets rollouts finish (30)" },
  share: {
    kind: "value",
    arg: "DIR",
    help: "a directory whose episode files the web page may list and replay",
  },
  ...CONFIG_FLAGS,
};

export async function serveCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("serve", argv, SERVE_FLAGS);
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
  const { loaded, registry } = await setup(args, overrides);
  const { config } = loaded;
  checkPolicyKeys(loaded);
  const port = parseInteger("--port", args.values.get("port") ?? "8787", 0, 65535);
  const host = args.values.get("host") ?? "127.0.0.1";
  const seconds = (flag: string, fallback: number) =>
    parseInteger(`--${flag}`, args.values.get(flag) ?? String(fallback), 0, 86_400);
  const token = args.values.get("token") ?? process.env.ROLLGYM_TOKEN ?? null;
  if (token === "")
    throw new UsageError("--token: an empty token would let anyone in; omit it to serve without auth");

  const maxBufferedGroups = parseInteger(
    "--max-buffered-groups",
    args.values.get("max-buffered-groups") ?? "64",
    1,
    1_000_000,
  );
  const resumeGraceMs = seconds("resume-grace", 60) * 1000;
  const shutdownDeadlineMs = seconds("shutdown-deadline", 30) * 1000;
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
    share: share === null ? null : absolute(share),
    maxBufferedGroups,
    resumeGraceMs,
    shutdownDeadlineMs,
    // The limits `rollgym rollout` checks a batch against, from the same config keys.
    maxGroupsPerRollout: config.rollgym.limits.max_groups_per_rollout,
    maxEpisodesInFlight: config.rollgym.limits.max_episodes_in_flight,
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
    `rollgym serving on ${url} (the web page; ${ws}/v1/rollouts) with the ${using}${token ? ", token required" : ""}\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      say(`${signal}: finishing running rollouts, then closing`);
      void server.shutdown(`server received ${signal}`).then(resolve);
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
}
