// `serve --token` reached by an OpenEnv client that sends no headers (issue 31, item 3): the
// token rides in the base URL's path, http://HOST:PORT/openenv/TAG/t/TOKEN, so the client's
// BASE + "/ws" carries it. The repo's OpenEnv-style Python client (test/openenv/openenv_client.py,
// the URL rule of OpenEnv's EnvClient) plays through it; a missing or wrong token is refused
// with 401; the token shows in no log line, no metric and no failure rollgym's own client reports.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withoutSecrets } from "../../protocol/secret-urls.ts";
import { servingUrl } from "../../src/bench/children.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { ROOT } from "../helpers/cli.ts";
import { remoteRegistry } from "../helpers/openenv-remote.ts";

const PYTHON = "/usr/bin/python3";
/** A token with characters a path segment must escape. */
const TOKEN = "s3cret/Tok+en=9";
const SEGMENT = encodeURIComponent(TOKEN);

let server: { url: string; child: ChildProcess; output: () => string } | null = null;
beforeAll(async () => {
  const file = join(mkdtempSync(join(tmpdir(), "rollgym-token-")), "token");
  writeFileSync(file, `${TOKEN}\n`);
  // Every request logged (trace), so a token that leaked into a log line would show.
  const child = spawn(process.execPath, ["src/cli/main.ts", "serve", "--port", "0", "--token-file", file], {
    cwd: ROOT,
    env: { ...process.env, ROLLGYM_LOG_LEVEL: "trace" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk) => (output += chunk));
  child.stderr!.on("data", (chunk) => (output += chunk));
  const url = await servingUrl(child.stdout!);
  if (!url) throw new Error(`rollgym serve exited before listening: ${output}`);
  server = { url, child, output: () => output };
}, 60_000);
afterAll(() => {
  server?.child.kill();
});

/** play_over_ws.py on `base` (one episode of seed 3): its exit code, stdout and stderr. */
async function play(base: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const episodes = JSON.stringify([{ seed: 3, actions: ["Up", "Left"] }]);
  try {
    const { stdout, stderr } = await promisify(execFile)(
      PYTHON,
      [join(ROOT, "test/openenv/play_over_ws.py"), base, episodes],
      {
        cwd: join(ROOT, "test/openenv"),
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
        timeout: 60_000,
      },
    );
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

describe("serve --token, reached by an OpenEnv client that sends no headers", { timeout: 60_000 }, () => {
  it("the base URL /openenv/TAG/t/TOKEN plays; no token or a wrong one is refused with 401", async () => {
    const played = await play(`${server!.url}/openenv/CoordSokoban/t/${SEGMENT}`);
    expect(played.code).toBe(0);
    const [episode] = JSON.parse(played.stdout) as { steps: unknown[]; state: { seed: number } }[];
    expect(episode.steps).toHaveLength(2);
    expect(episode.state.seed).toBe(3);

    for (const base of [
      `${server!.url}/openenv/CoordSokoban`,
      `${server!.url}/openenv/CoordSokoban/t/wrong`,
      `${server!.url}/openenv/CoordSokoban/t/${SEGMENT}x`,
    ]) {
      const refused = await play(base);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(/HTTP 401/);
    }
  });

  it("rollgym's own client plays a tag behind the token form, and names it redacted when it fails", async () => {
    const good = await remoteRegistry("Behind", "CoordSokoban", {
      url: `${server!.url}/openenv/CoordSokoban/t/${SEGMENT}`,
    });
    const request = defaultBatchRequest("val", {
      tags: [{ tag: "Behind", groups: 1 }],
      groupSize: 2,
      seed: 4,
    });
    expect((await runBatch(good, request, randomPolicy())).failed).toBe(0);

    const wrong = await remoteRegistry("Behind", "CoordSokoban", {
      url: `${server!.url}/openenv/CoordSokoban/t/${SEGMENT}-old`,
    });
    const result = await runBatch(wrong, request, randomPolicy());
    for (const e of result.episodes) {
      expect(e.failure).toMatch(
        /^reset: openenv_connect: cannot open a session on ws:\/\/127\.0\.0\.1:\d+\/openenv\/CoordSokoban\/t\/\[redacted\]\/ws: HTTP 401 at the upgrade$/,
      );
    }
    expect(withoutSecrets(`ws://h/openenv/T/t/${SEGMENT}/ws?token=abc&x=1`)).toBe(
      "ws://h/openenv/T/t/[redacted]/ws?token=[redacted]&x=1",
    );
  });

  it("the token shows in no log line and no metric", async () => {
    // A plain GET of the session path is an HTTP request fastify logs (404).
    const get = await fetch(`${server!.url}/openenv/CoordSokoban/t/${SEGMENT}/ws`);
    expect(get.status).toBe(404);
    // So is a page-style ?token= on a path nothing serves (fastify's own 404 would log it).
    const stray = await fetch(`${server!.url}/no/such/page?token=${SEGMENT}`);
    expect(stray.status).toBe(404);
    expect(await stray.text()).not.toContain(SEGMENT);
    const metrics = await (
      await fetch(`${server!.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
    ).text();
    expect(metrics).toContain("rollgym_");
    // The log has seen the requests above (trace level names each one).
    expect(server!.output()).toMatch(/\/openenv\/CoordSokoban\/t\/\[redacted\]\/ws/);
    expect(server!.output()).toMatch(/\/no\/such\/page\?token=\[redacted\]/);
    for (const text of [metrics, server!.output()]) {
      expect(text).not.toContain(TOKEN);
      expect(text).not.toContain(SEGMENT);
      expect(text).not.toContain("s3cret");
    }
  });
});
