// `rollgym serve`: the rollout server for trainers (WebSocket /v1/rollouts, /healthz,
// /metrics, /v1/envs). Without --llm it serves with the built-in policy.

import { buildServer } from "../server/app.ts";
import { parseArgs, parseInteger, UsageError } from "./args.ts";
import { buildRegistry, loadOrExplain, readyPolicy } from "./rollout.ts";

const FLAGS = {
  host: { kind: "value", help: "interface to listen on (default 127.0.0.1)" },
  port: { kind: "value", help: "port (default 8787; 0 picks a free one)" },
  token: { kind: "value", help: "bearer token clients must present (default $ROLLGYM_TOKEN; none = open)" },
  config: { kind: "value", help: "a YAML config file (RAGEN key names)" },
  llm: { kind: "value", help: "OpenAI-compatible base URL" },
  model: { kind: "value", help: "model served at --llm" },
  policy: { kind: "value", help: "built-in policy when no --llm: oracle|random" },
  "max-buffered-groups": {
    kind: "value",
    help: "finished groups a stream rollout holds for a slow client (64)",
  },
  "resume-grace": { kind: "value", help: "seconds a dropped session waits for its client (60)" },
  "shutdown-deadline": { kind: "value", help: "seconds SIGTERM lets rollouts finish (30)" },
} as const;

export async function serveCommand(argv: readonly string[]): Promise<void> {
  const args = parseArgs("serve", argv, FLAGS);
  for (const p of args.positionals) {
    if (!p.includes("="))
      throw new UsageError(`serve: unexpected argument ${JSON.stringify(p)} (overrides look like key=value)`);
  }
  const overrides = [...args.positionals];
  if (args.values.has("llm")) overrides.push(`rollgym.llm.base_url=${args.values.get("llm")}`);
  if (args.values.has("model")) overrides.push(`rollgym.llm.model=${args.values.get("model")}`);
  if (args.values.has("policy")) overrides.push(`rollgym.policy.name=${args.values.get("policy")}`);
  const { config, ignored, notices } = loadOrExplain(
    args.values.has("config") ? [args.values.get("config")!] : [],
    overrides,
  );
  for (const key of ignored) process.stderr.write(`rollgym: ignoring trainer-only key ${key}\n`);
  for (const notice of notices) process.stderr.write(`rollgym: ${notice}\n`);
  const port = parseInteger("--port", args.values.get("port") ?? "8787", 0, 65535);
  const host = args.values.get("host") ?? "127.0.0.1";
  const seconds = (flag: string, fallback: number) =>
    parseInteger(`--${flag}`, args.values.get(flag) ?? String(fallback), 0, 86_400);
  const token = args.values.get("token") ?? process.env.ROLLGYM_TOKEN ?? null;
  if (token === "")
    throw new UsageError("--token: an empty token would let anyone in; omit it to serve without auth");

  let registry: ReturnType<typeof buildRegistry>;
  try {
    registry = buildRegistry(config);
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const policy = await readyPolicy(config);
  const server = await buildServer({
    config,
    registry,
    policy,
    token,
    maxBufferedGroups: parseInteger(
      "--max-buffered-groups",
      args.values.get("max-buffered-groups") ?? "64",
      1,
      1_000_000,
    ),
    resumeGraceMs: seconds("resume-grace", 60) * 1000,
    shutdownDeadlineMs: seconds("shutdown-deadline", 30) * 1000,
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
  process.stdout.write(
    `rollgym serving on ${url} (${ws}/v1/rollouts) with the ${using}${token ? ", token required" : ""}\n`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stderr.write(`rollgym: ${signal}: finishing running rollouts, then closing\n`);
      void server.shutdown(`server received ${signal}`).then(resolve);
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
}
