// One golden transcript of OpenEnv sessions (golden-transcript.json: frames sent, answers
// expected) played on both OpenEnv servers of this repository: rollgym serve's /openenv/TAG and
// the Python provider (python/rollgym_envs). Both check messages against the one declaration in
// protocol/openenv.ts (the Python side through its generated JSON Schema), so each bad frame must
// get the same code, message and entries from both; where they legitimately differ (the env
// played, its state fields, free-text actions) the transcript says so with $per. Both serve the
// declaration's models at GET /schema.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { OPENENV_MODELS } from "../../protocol/openenv.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { ROOT } from "../helpers/cli.ts";
import { startPythonProvider } from "../helpers/openenv-remote.ts";

type Target = "rollgym serve" | "python provider";

interface Exchange {
  send?: unknown;
  sendText?: string;
  sendBinary?: string;
  expect: unknown;
  only?: Target;
}

const TRANSCRIPT = JSON.parse(readFileSync(new URL("golden-transcript.json", import.meta.url), "utf8")) as {
  targets: Record<Target, Record<string, string>>;
  sessions: { name: string; exchanges: Exchange[] }[];
};

/** `value` for `target`: its $per entries chosen, its "{{name}}" variables filled in. */
function forTarget(value: unknown, target: Target): unknown {
  if (typeof value === "string")
    return value.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
      const known = TRANSCRIPT.targets[target][name];
      if (known === undefined) throw new Error(`golden transcript: no variable ${name} for ${target}`);
      return known;
    });
  if (Array.isArray(value)) return value.map((item) => forTarget(item, target));
  if (typeof value === "object" && value !== null) {
    const object = value as Record<string, unknown>;
    if ("$per" in object) return forTarget((object.$per as Record<Target, unknown>)[target], target);
    return Object.fromEntries(Object.entries(object).map(([k, v]) => [k, forTarget(v, target)]));
  }
  return value;
}

const ANY: Record<string, unknown> = {
  string: String,
  number: Number,
  boolean: Boolean,
  object: Object,
  array: Array,
};

/** `expected` with its matchers ($any, $startsWith) as vitest's asymmetric matchers. */
function matcher(expected: unknown): unknown {
  if (Array.isArray(expected)) return expected.map(matcher);
  if (typeof expected !== "object" || expected === null) return expected;
  const object = expected as Record<string, unknown>;
  if ("$startsWith" in object)
    return expect.stringMatching(`^${String(object.$startsWith).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`);
  if ("$any" in object) return expect.any(ANY[object.$any as string]);
  return Object.fromEntries(Object.entries(object).map(([k, v]) => [k, matcher(v)]));
}

/** One /ws session: each frame's answer (parsed), or `{$close: code}` once the socket closed. */
async function openSession(base: string) {
  const ws = new WebSocket(`${base.replace(/^http/, "ws")}/ws`);
  const answers: unknown[] = [];
  const waiting: ((answer: unknown) => void)[] = [];
  const arrive = (answer: unknown) => {
    const wake = waiting.shift();
    if (wake) wake(answer);
    else answers.push(answer);
  };
  ws.on("message", (data, isBinary) => {
    expect(isBinary).toBe(false);
    arrive(JSON.parse(data.toString()));
  });
  ws.on("close", (code) => arrive({ $close: code }));
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  return {
    ws,
    exchange(frame: Exchange, target: Target): Promise<unknown> {
      if (frame.sendBinary !== undefined) ws.send(Buffer.from(frame.sendBinary), { binary: true });
      else if (frame.sendText !== undefined) ws.send(frame.sendText);
      else ws.send(JSON.stringify(forTarget(frame.send, target)));
      const ready = answers.shift();
      return ready !== undefined ? Promise.resolve(ready) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

async function play(base: string, target: Target): Promise<void> {
  for (const session of TRANSCRIPT.sessions) {
    const s = await openSession(base);
    for (const [i, frame] of session.exchanges.entries()) {
      if (frame.only !== undefined && frame.only !== target) continue;
      const answer = await s.exchange(frame, target);
      const sent = frame.sendText ?? frame.sendBinary ?? JSON.stringify(frame.send);
      expect(answer, `${session.name}, exchange ${i}: ${sent.slice(0, 120)}`).toEqual(
        matcher(forTarget(frame.expect, target)),
      );
    }
    s.ws.terminate();
  }
}

describe("the golden OpenEnv transcript", () => {
  let server: RollgymServer;
  let url: string;
  let python: Awaited<ReturnType<typeof startPythonProvider>>;
  beforeAll(async () => {
    server = await buildServer({});
    url = await server.listen();
    python = await startPythonProvider(ROOT, [
      "python/examples/guess_number_env.py",
      "--port",
      "0",
      "--workers",
      "1",
    ]);
  }, 60_000);
  afterAll(async () => {
    python?.child.kill();
    await server?.shutdown();
  });

  it("rollgym serve answers it", async () => {
    await play(`${url}/openenv/CoordSokoban`, "rollgym serve");
  });

  it("the Python provider answers it", { timeout: 30_000 }, async () => {
    await play(python.base, "python provider");
  });

  it("GET /schema answers the declaration's models on both", async () => {
    const models = JSON.parse(JSON.stringify(OPENENV_MODELS));
    expect(await (await fetch(`${url}/openenv/CoordSokoban/schema`)).json()).toEqual(models);
    expect(await (await fetch(`${python.base}/schema`)).json()).toEqual(models);
  });

  it("covers reset, step, state and close, and each error code a frame alone can cause", () => {
    const sent = TRANSCRIPT.sessions.flatMap((s) => s.exchanges);
    const types = sent.map((e) => (e.send as { type?: unknown } | undefined)?.type);
    for (const type of ["reset", "step", "state", "close"]) expect(types).toContain(type);
    const codes = sent.map((e) => (e.expect as { data?: { code?: unknown } }).data?.code);
    for (const code of ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR"])
      expect(codes).toContain(code);
  });
});
