// SIGTERM on `rollgym serve`: new work is refused, running rollouts finish (or are cancelled
// at the deadline), clients hear `closing` and their `batch`, then the socket closes with 1001.
// Also through the wrappers users start it with (`npm start`, `npx rollgym serve`), with a
// client that does not read, and with a second and third signal.
import { type ChildProcess, spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { servingUrl } from "../../src/bench/children.ts";
import { ROOT, spawnServe } from "../helpers/cli.ts";
import { descendants, gone, killLeftovers } from "../helpers/processes.ts";
import { stalledRollout, TestClient } from "../helpers/ws-client.ts";

// Processes a failed test may leave behind (an orphaned server is what these tests look for).
const leftovers: number[] = [];
afterEach(() => killLeftovers(leftovers));

describe("graceful shutdown", () => {
  it("refuses new work, cancels what is left at the deadline, sends the verdict, and exits", async () => {
    const { url, child } = await spawnServe(["--shutdown-deadline", "2"]);
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    const client = await TestClient.connect(url);
    await stalledRollout(client);
    child.kill("SIGTERM");
    const closing = await client.next((f) => f.type === "closing");
    expect(closing).toMatchObject({ deadline_ms: 2_000 });
    client.send({
      type: "rollout",
      id: "late",
      tags: [{ tag: "Bandit", groups: 1 }],
      mode: "val",
      group_size: 1,
      delivery: "batch",
    });
    expect(await client.next((f) => f.type === "error" && f.rollout === "late")).toMatchObject({
      code: "shutting_down",
    });
    const batch = await client.next((f) => f.type === "batch" && f.rollout === "last");
    // Cancelled at the deadline: the groups it had not finished are reported failed.
    expect((batch.failed_groups as number[]).length).toBeGreaterThan(0);
    await client.closed();
    expect(client.closeCode).toBe(1001);
    expect(await exited).toBe(0);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  }, 120_000);

  // `npm start` runs `sh -c` (dash, which does not exec its command); `npx` runs its own `sh -c`.
  // A SIGTERM to the wrapper used to kill only the shell, leaving the server running unseen.
  for (const [name, command, args] of [
    ["npm start", "npm", ["start", "--", "--port", "0", "--shutdown-deadline", "1"]],
    ["npx rollgym serve", "npx", ["rollgym", "serve", "--port", "0", "--shutdown-deadline", "1"]],
  ] as const) {
    it(`SIGTERM to \`${name}\` reaches the server: it drains and every process of the chain exits`, async () => {
      const served = await serve(command, args);
      const chain = descendants(served.child.pid!);
      leftovers.push(...chain);
      expect(chain.length).toBeGreaterThan(0);
      const client = await TestClient.connect(served.url);
      await stalledRollout(client);
      served.child.kill("SIGTERM");
      await client.next((f) => f.type === "closing");
      const batch = await client.next((f) => f.type === "batch" && f.rollout === "last");
      expect((batch.failed_groups as number[]).length).toBeGreaterThan(0);
      await client.closed();
      expect(client.closeCode).toBe(1001);
      await served.exited;
      await gone(chain);
      await served.line(/closed: cancelled 1 running rollout\(s\)/);
    }, 120_000);
  }

  it("Ctrl-C on `npm start` (SIGINT to the whole process group, passed on by npm too) counts once", async () => {
    const served = await serve("npm", ["start", "--", "--port", "0", "--shutdown-deadline", "1"], {
      detached: true,
    });
    leftovers.push(...descendants(served.child.pid!));
    const client = await TestClient.connect(served.url);
    // The terminal signals the foreground process group: npm and the server it exec'd.
    process.kill(-served.child.pid!, "SIGINT");
    await client.closed();
    expect(client.closeCode).toBe(1001);
    expect(await served.exited).toBe(0);
    await served.line(/closed/);
    expect(served.stderr().match(/SIGINT/g)).toHaveLength(1);
    expect(served.stderr()).not.toContain("SIGINT again");
  }, 120_000);

  it("drops a client that does not read instead of waiting for its close handshake", async () => {
    const served = await serve(process.execPath, [
      "src/cli/main.ts",
      "serve",
      "--port",
      "0",
      "--shutdown-deadline",
      "1",
    ]);
    const client = await TestClient.connect(served.url);
    await stalledRollout(client);
    client.pauseReading();
    served.child.kill("SIGTERM");
    // The server's own account: it gave up on the close handshake and exited. ws alone would
    // have waited 30 s for it.
    expect(await served.exited).toBe(0);
    expect(served.stderr()).toContain("dropped 1 connection(s) that did not answer the close");
  }, 120_000);

  it("a second SIGTERM cancels running rollouts at once, still sending their verdicts; a third exits", async () => {
    const args = ["src/cli/main.ts", "serve", "--port", "0", "--shutdown-deadline", "3600"];
    const served = await serve(process.execPath, args);
    const client = await TestClient.connect(served.url);
    await stalledRollout(client);
    served.child.kill("SIGTERM");
    await client.next((f) => f.type === "closing");
    served.child.kill("SIGTERM");
    // Well before the hour-long deadline.
    const batch = await client.next((f) => f.type === "batch" && f.rollout === "last");
    expect((batch.failed_groups as number[]).length).toBeGreaterThan(0);
    await client.closed();
    expect(client.closeCode).toBe(1001);
    expect(await served.exited).toBe(0);
    expect(served.stderr()).toContain("SIGTERM again: cancelling running rollouts now");

    const third = await serve(process.execPath, args);
    const held = await TestClient.connect(third.url);
    await stalledRollout(held);
    third.child.kill("SIGTERM");
    await held.next((f) => f.type === "closing");
    third.child.kill("SIGTERM");
    await third.line(/SIGTERM again/);
    third.child.kill("SIGTERM");
    expect(await third.exited).toBe(1);
    expect(third.stderr()).toContain("a third time: exiting now");
  }, 120_000);
});

interface Served {
  child: ChildProcess;
  url: string;
  exited: Promise<number | null>;
  stderr(): string;
  /** Resolves once stderr has a line matching `pattern`. */
  line(pattern: RegExp): Promise<void>;
}

/** Starts a command that ends up running `rollgym serve`; resolves once it prints its URL. */
async function serve(
  command: string,
  args: readonly string[],
  options: { detached?: boolean } = {},
): Promise<Served> {
  const child = spawn(command, args, {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    detached: options.detached ?? false,
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  let stderr = "";
  const watchers: { pattern: RegExp; resolve: () => void }[] = [];
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
    for (const w of watchers.filter((w) => w.pattern.test(stderr))) {
      watchers.splice(watchers.indexOf(w), 1);
      w.resolve();
    }
  });
  const url = await servingUrl(child.stdout!);
  if (!url) throw new Error(`${command} ${args.join(" ")} exited before listening: ${stderr}`);
  return {
    child,
    url,
    exited,
    stderr: () => stderr,
    line: (pattern) =>
      pattern.test(stderr)
        ? Promise.resolve()
        : new Promise((resolve) => watchers.push({ pattern, resolve })),
  };
}
