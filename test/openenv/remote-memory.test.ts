// Issue #28.2: a remote OpenEnv env that answers with 20 MB observations once took a server with
// three clients × 32 episodes past 5.5 GiB of RSS within a minute (OpenEnv's client takes 100 MB
// frames). Answers are now capped at max_answer_bytes (1 MiB by default, checked at the frame's
// header) and charged to the memory budget before they are parsed. The server runs in its own
// process; its peak RSS (VmHWM) must stay within docs/server.md's bound for the row, and a
// bystander is served throughout.
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { WebSocketServer } from "ws";
import { spawnServe } from "../helpers/cli.ts";
import { fakeOpenEnvServer, remoteTagConfigFile } from "../helpers/openenv-remote.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const MiB = 1024 * 1024;
const CLIENTS = 3;
const EPISODES = 32;
/**
 * docs/server.md "Memory bounds, from the limits" for this load: the headroom, the memory
 * budget's text at 1.1 × what is charged, the answers being received (one max_answer_bytes per
 * remote session) and the frame being parsed.
 */
const BOUND_MIB = 300 + 1.1 * 512 + CLIENTS * EPISODES * 1 + 16;

let serve: ChildProcess;
let url: string;
let remote: WebSocketServer;
let observation: Buffer;

function statusMiB(field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${serve.pid}/status`, "utf8");
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)![1]) / 1024;
}

beforeAll(async () => {
  let base: string;
  ({ server: remote, base } = await fakeOpenEnvServer(() => observation));
  const config = remoteTagConfigFile("Big", base, {
    max_sessions: CLIENTS * EPISODES,
    check_seed: false,
    actions: ["Up"],
  });
  ({ url, child: serve } = await spawnServe(["--config", config, "--policy", "random"]));
}, 60_000);

afterAll(async () => {
  serve?.kill("SIGKILL");
  await new Promise((resolve) => remote?.close(resolve));
});

/** Each client's 32 episodes (16 groups of 2) on the remote tag; resolves to every group frame. */
async function threeClients(prefix: string): Promise<Frame[]> {
  const clients = await Promise.all(Array.from({ length: CLIENTS }, () => TestClient.connect(url)));
  await Promise.all(
    clients.map((c, i) =>
      playToVerdict(
        c,
        rolloutFrame(`${prefix}${i}`, EPISODES / 2, 2, {
          tags: [{ tag: "Big", groups: EPISODES / 2 }],
          delivery: "stream",
          seed: i,
        }),
      ),
    ),
  );
  const groups = clients.flatMap((c) => c.of("group"));
  for (const c of clients) c.close();
  return groups;
}

it("20 MB remote observations for 3 clients × 32 episodes: refused at the header, RSS within the bound", async () => {
  const start = statusMiB("VmRSS");
  observation = Buffer.from(
    JSON.stringify({
      type: "observation",
      data: { observation: { text: "x".repeat(20 * MiB), actions: ["Up"] }, reward: 0, done: false },
    }),
  );
  const groups = await threeClients("huge");
  // Before the cap this phase alone grew the server by 1.46 GiB at its peak.
  expect(statusMiB("VmHWM") - start).toBeLessThan(BOUND_MIB);
  expect(groups).toHaveLength(CLIENTS * (EPISODES / 2));
  for (const group of groups)
    for (const episode of group.episodes as { failure: string | null }[])
      expect(episode.failure).toMatch(/openenv_garbage: .*max_answer_bytes \(1048576 bytes\)/);

  // Just under the cap: played, each answer charged before it is parsed.
  observation = Buffer.from(
    JSON.stringify({
      type: "observation",
      data: { observation: { text: "y".repeat(MiB - 200), actions: ["Up"] }, reward: 0, done: false },
    }),
  );
  const played = await threeClients("near-cap");
  expect(played).toHaveLength(CLIENTS * (EPISODES / 2));

  expect(statusMiB("VmHWM") - start).toBeLessThan(BOUND_MIB);
  const bystander = await TestClient.connect(url);
  expect(
    await playToVerdict(bystander, rolloutFrame("after", 2, 2, { tags: [{ tag: "Bandit", groups: 2 }] })),
  ).toMatchObject({ type: "batch", failed: 0 });
  bystander.close();
}, 300_000);
