// SIGTERM on `rollgym serve`: new work is refused, running rollouts finish (or are cancelled
// at the deadline), clients hear `closing` and their `batch`, then the socket closes with 1001.
import { describe, expect, it } from "vitest";
import { spawnServe } from "../helpers/cli.ts";
import { TestClient } from "../helpers/ws-client.ts";

describe("graceful shutdown", () => {
  it("refuses new work, cancels what is left at the deadline, sends the verdict, and exits", async () => {
    const { url, child } = await spawnServe(["--shutdown-deadline", "2"]);
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    const client = await TestClient.connect(url);
    // A stream rollout whose client never acknowledges stalls at the buffer bound: only the
    // deadline can end it.
    client.send({
      type: "rollout",
      id: "last",
      tags: [{ tag: "SimpleSokoban", groups: 1000 }],
      mode: "train",
      group_size: 4,
      delivery: "stream",
    });
    client.send({ type: "credit", groups: 10 });
    await client.next((f) => f.type === "group");
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
    expect(batch).toMatchObject({ episodes: 4000 });
    expect(batch.failed as number).toBeGreaterThan(0); // cancelled at the deadline
    await client.closed();
    expect(client.closeCode).toBe(1001);
    expect(await exited).toBe(0);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  }, 120_000);
});
