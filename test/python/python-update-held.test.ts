// A Python client whose rollout an open weight update holds after its trainer died (issue #30
// item 4): under Debian's /usr/bin/python3 against a real server on 127.0.0.1:0, its timeout
// names the update as the cause instead of a bare "no verdict" (test/python/update_held_check.py).
import { spawn } from "node:child_process";
import { expect, it } from "vitest";
import { buildServer } from "../../src/server/app.ts";
import { ROOT } from "../helpers/cli.ts";
import { VersionedPolicy } from "../helpers/versioned-policy.ts";
import { TestClient } from "../helpers/ws-client.ts";

const TRAINER = { type: "hello", protocol: 1, client: "trainer", role: "trainer" };

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

it("a Python rollout held by an update whose trainer is gone times out naming the update", async () => {
  const server = await buildServer({ policy: new VersionedPolicy(1), resumeGraceMs: 60_000 });
  try {
    const url = await server.listen(0, "127.0.0.1");
    const trainer = await TestClient.connect(url, { hello: TRAINER });
    trainer.send({ type: "begin_update", id: "held-update" });
    await trainer.next((f) => f.type === "update_begun");
    trainer.ws.terminate();
    await expect.poll(() => server.state.updates.status()?.trainer).toBe("disconnected");

    const summary = (await pythonCheck("test/python/update_held_check.py", { ROLLGYM_URL: url })) as {
      timeout: string;
      notices: string[];
    };
    expect(summary.notices).toHaveLength(1);
    expect(summary.notices[0]).toMatch(/^rollout "held" is held: weight update "held-update" open for /);
    expect(summary.timeout).toMatch(
      /^\[timeout\] no verdict within 3 s; the rollout was cancelled; the server said: rollout "held" is held: weight update "held-update" open for [\d.]+ s \(1 replica paused, version "initial" \(ordinal 0\) in force\); its trainer's connection has been gone for [\d.]+ s/,
    );
    expect(server.state.updates.closed).toBe(true);
  } finally {
    await server.shutdown();
  }
}, 150_000);
