// rollgym_client's asynchronous-RL surface (trainer sessions, endless streams, the update
// bracket, versions in pack_batch) under Debian's /usr/bin/python3, against a real server on
// 127.0.0.1:0 whose policy has weight updates (test/python/async_check.py says what it checks);
// and against one that reserves the trainer role with a trainer token and ends updates left
// open past max_update_s (test/python/trainer_token_check.py).
import { spawn } from "node:child_process";
import { afterAll, beforeAll, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { ROOT } from "../helpers/cli.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";

let server: RollgymServer;
let url: string;

beforeAll(async () => {
  server = await buildServer({ policy: new VersionedPolicy(1), maxBufferedGroups: 8 });
  url = await server.listen(0, "127.0.0.1");
});
afterAll(async () => {
  await server.shutdown();
});

/** Runs `script` under /usr/bin/python3; resolves to the JSON of its last line once it exits 0. */
async function pythonCheck(script: string, env: Record<string, string>): Promise<Record<string, unknown>> {
  const result = await new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
    const child = spawn("/usr/bin/python3", [script], {
      cwd: ROOT,
      env: { ...process.env, ...env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
  expect(result.code, `${result.out}\n${result.err}`).toBe(0);
  return JSON.parse(result.out.trim().split("\n").at(-1)!);
}

it("streams, brackets updates and packs versions from Python", async () => {
  const summary = (await pythonCheck("test/python/async_check.py", { ROLLGYM_URL: url })) as {
    sync: { updates: number; groups: number };
    not_trainer: string;
    async: { groups: number };
  };
  expect(summary.sync.updates).toBe(5);
  expect(summary.sync.groups).toBeGreaterThanOrEqual(8);
  expect(summary.not_trainer).toMatch(/\[not_trainer\] begin_update: only the trainer session/);
  expect(summary.async.groups).toBeGreaterThanOrEqual(3);
}, 150_000);

it("a Python trainer presents the trainer token, and is told when its update expires", async () => {
  const token = "python-trainer-token-4c1d";
  const reserved = await buildServer({
    policy: new VersionedPolicy(1),
    trainerToken: token,
    maxUpdateMs: 1_000,
  });
  try {
    const reservedUrl = await reserved.listen(0, "127.0.0.1");
    const summary = await pythonCheck("test/python/trainer_token_check.py", {
      ROLLGYM_URL: reservedUrl,
      ROLLGYM_TRAINER_TOKEN: token,
    });
    expect(summary.max_update_s).toBe(1);
    expect(summary.late).toMatch(
      /^update "update-\w+-\d+" expired: it stayed open longer than max_update_s \(1 s\)/,
    );
    expect(reserved.state.updates.closed).toBe(false);
  } finally {
    await reserved.shutdown();
  }
}, 150_000);
