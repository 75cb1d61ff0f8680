// OpenEnv sessions in the server's memory budget, both directions: a session rollgym serves on
// /openenv/TAG/ws is charged OPENENV_SESSION_BYTES to max_held_bytes (past it a new socket gets
// CAPACITY_REACHED naming the bound, and a closed session gives its bytes back); an episode of a
// remote tag (env_type openenv) is charged its client session on top of EPISODE_BYTES.
import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import {
  EPISODE_BYTES,
  episodesBytes,
  OPENENV_SESSION_BYTES,
  REMOTE_SESSION_BYTES,
} from "../../src/server/memory-costs.ts";
import { remoteRegistry } from "../helpers/openenv-remote.ts";

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

/** Opens a session and returns its first answer (and the socket). */
async function firstAnswer(
  url: string,
): Promise<{ ws: WebSocket; answer: { type: string; data: Record<string, unknown> } }> {
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/openenv/CoordSokoban/ws`);
  const answer = new Promise<{ type: string; data: Record<string, unknown> }>((resolve) =>
    ws.once("message", (data) => resolve(JSON.parse(data.toString()))),
  );
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  ws.send(JSON.stringify({ type: "reset", data: { seed: 1 } }));
  return { ws, answer: await answer };
}

describe("OpenEnv sessions in the memory budget", () => {
  it("served sessions are charged to max_held_bytes; past it CAPACITY_REACHED names the bound", async () => {
    const max = 3 * OPENENV_SESSION_BYTES + 100;
    server = await buildServer({ maxHeldBytes: max, maxHeldBytesPerConnection: max });
    const url = await server.listen();
    const open: WebSocket[] = [];
    for (let i = 0; i < 3; i++) {
      const { ws, answer } = await firstAnswer(url);
      expect(answer.type).toBe("observation");
      open.push(ws);
    }
    const refused = await firstAnswer(url);
    expect(refused.answer.type).toBe("error");
    expect(refused.answer.data.code).toBe("CAPACITY_REACHED");
    expect(refused.answer.data.message).toContain(
      `max_held_bytes is ${max}; ${3 * OPENENV_SESSION_BYTES} bytes are held`,
    );
    expect(refused.answer.data.message).toContain(
      `env sessions ${3 * OPENENV_SESSION_BYTES}) and an OpenEnv session needs ${OPENENV_SESSION_BYTES}`,
    );

    // A closed session gives its bytes back: the next one is served.
    open[0].close();
    await new Promise((resolve) => open[0].once("close", resolve));
    let again = await firstAnswer(url);
    // The server may see the close a moment after the client does.
    for (let i = 0; again.answer.type === "error" && i < 50; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      again = await firstAnswer(url);
    }
    expect(again.answer.type).toBe("observation");
    for (const ws of [...open, again.ws]) ws.terminate();
  });

  it("an episode of a remote tag holds its client session on top of EPISODE_BYTES", async () => {
    const registry = await remoteRegistry("Remote", "CoordSokoban", { url: "http://127.0.0.1:9" });
    const tags = [
      { tag: "Remote", groups: 2 },
      { tag: "CoordSokoban", groups: 1 },
    ];
    expect(episodesBytes(registry, tags, 4)).toBe(
      8 * (EPISODE_BYTES + REMOTE_SESSION_BYTES) + 4 * EPISODE_BYTES,
    );
  });
});
