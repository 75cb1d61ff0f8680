// rollgym_client's asynchronous-RL surface (trainer sessions, endless streams, the update
// bracket, versions in pack_batch) under Debian's /usr/bin/python3, against a real server on
// 127.0.0.1:0 whose policy has weight updates (test/python/async_check.py says what it checks).
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

it("streams, brackets updates and packs versions from Python", async () => {
  const result = await new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
    const child = spawn("/usr/bin/python3", ["test/python/async_check.py"], {
      cwd: ROOT,
      env: { ...process.env, ROLLGYM_URL: url, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
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
  const summary = JSON.parse(result.out.trim().split("\n").at(-1)!);
  expect(summary.sync.updates).toBe(5);
  expect(summary.sync.groups).toBeGreaterThanOrEqual(8);
  expect(summary.not_trainer).toMatch(/\[not_trainer\] begin_update: only the trainer session/);
  expect(summary.async.groups).toBeGreaterThanOrEqual(3);
}, 150_000);
