// rollgym's tags as OpenEnv environments (docs/openenv.md), with a Node WebSocket client on a
// real server: answers shaped as OpenEnv's (test/fixtures/openenv/protocol.json), bad input
// refused with the code OpenEnv uses and a message naming the field and what is allowed, many
// sessions at once each equal to the env run in process, capacity, and the server's upgrade
// protections (unknown route, token, Origin, frame size, silent sockets).
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { createRegistry } from "../../envs/catalog.ts";
import { buildServer, type RollgymServer, type ServerOptions } from "../../src/server/app.ts";
import { type Answer, OpenEnvTestSession } from "../helpers/openenv-session.ts";

const FIXTURE = JSON.parse(
  readFileSync(new URL("../fixtures/openenv/protocol.json", import.meta.url), "utf8"),
) as {
  websocket: { error_codes: string[] };
};

let server: RollgymServer | null = null;
afterEach(async () => {
  await server?.shutdown();
  server = null;
});

async function start(options: ServerOptions = {}): Promise<string> {
  server = await buildServer(options);
  return server.listen();
}

/** A GET of an HTTP route of the running server, through fastify's inject (no socket needed). */
async function getJson(path: string) {
  return (await server!.app.inject({ method: "GET", url: path })).json();
}

/** A session whose every answer is checked against OpenEnv's shapes on the way in. */
const Session = {
  open: (url: string, tag: string, options: WebSocket.ClientOptions = {}) =>
    OpenEnvTestSession.open(url, tag, {
      ...options,
      check: (answer, isBinary) => {
        expect(isBinary).toBe(false);
        expectOpenEnvShape(answer);
      },
    }),
};

function expectOpenEnvShape(answer: Answer): void {
  expect(["observation", "state", "error"]).toContain(answer.type);
  expect(Object.keys(answer).sort()).toEqual(["data", "type"]);
  if (answer.type === "observation")
    expect(Object.keys(answer.data).sort()).toEqual(["done", "observation", "reward"]);
  if (answer.type === "error") {
    expect(FIXTURE.websocket.error_codes).toContain(answer.data.code);
    expect(typeof answer.data.message).toBe("string");
    // VALIDATION_ERROR's entries have pydantic's keys, as OpenEnv's do.
    for (const entry of (answer.data.errors ?? []) as object[])
      expect(Object.keys(entry).sort()).toEqual(["input", "loc", "msg", "type"]);
  }
  if (answer.type === "state") expect(answer.data).toHaveProperty("step_count");
}

function expectError(answer: Answer, code: string, ...mentions: string[]): void {
  expect(answer.type).toBe("error");
  expect(answer.data.code).toBe(code);
  for (const word of mentions) expect(answer.data.message).toContain(word);
}

/** What an upgrade to `path` is refused with: status and body. */
function refusal(
  url: string,
  path: string,
  options: WebSocket.ClientOptions = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}${path}`, options);
    ws.once("open", () => reject(new Error("the upgrade was accepted")));
    ws.once("error", () => {});
    ws.once("unexpected-response", (_request, response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
  });
}

/** The episode played in process: what each answer must equal. */
function inProcess(tag: string, seed: number, actions: string[]) {
  const env = createRegistry().tag(tag).make();
  const first = env.reset(seed);
  const steps = [];
  for (const name of actions) {
    const r = env.step(env.actionNames.indexOf(name) + 1);
    steps.push({ text: r.observation, reward: r.reward, done: r.terminated || r.truncated, info: r.info });
    if (r.terminated || r.truncated) break;
  }
  return { first, steps };
}

describe("OpenEnv sessions on /openenv/TAG/ws", () => {
  it("reset, step and state answer as OpenEnv does, with the env's own observations and rewards", async () => {
    const url = await start();
    const s = await Session.open(url, "CoordSokoban");
    const expected = inProcess("CoordSokoban", 3, ["Right", "Left", "Up"]);
    const first = await s.send({ type: "reset", data: { seed: 3, episode_id: "e-3" } });
    expect(first).toEqual({
      type: "observation",
      data: {
        observation: {
          text: expected.first,
          actions: ["Up", "Down", "Left", "Right"],
          truncated: false,
          info: {},
        },
        reward: null,
        done: false,
      },
    });
    for (const [i, name] of ["Right", "Left", "Up"].entries()) {
      const answer = await s.send({ type: "step", data: { action: name.toLowerCase() } });
      const want = expected.steps[i];
      expect(answer.data).toEqual({
        observation: {
          text: want.text,
          actions: ["Up", "Down", "Left", "Right"],
          truncated: false,
          info: { ...want.info },
        },
        reward: want.reward,
        done: want.done,
      });
    }
    expect(expected.steps.at(-1)?.done).toBe(true);
    expect(await s.send({ type: "state" })).toEqual({
      type: "state",
      data: {
        episode_id: "e-3",
        step_count: 3,
        tag: "CoordSokoban",
        seed: 3,
        done: true,
        max_actions_per_traj: 10,
      },
    });
    expectError(
      await s.send({ type: "step", data: { action: "Up" } }),
      "EXECUTION_ERROR",
      "episode is over",
      "reset",
    );
    // A reset without a seed draws one and says which in state.
    await s.send({ type: "reset" });
    const state = (await s.send({ type: "state" })).data;
    expect(state).toMatchObject({ step_count: 0, done: false });
    expect(Number.isInteger(state.seed)).toBe(true);
    s.ws.send(JSON.stringify({ type: "close" }));
    expect((await s.closed).code).toBe(1000);
  });

  it("refuses bad input with OpenEnv's codes, naming the field and what is allowed, and goes on", async () => {
    const url = await start();
    const s = await Session.open(url, "CoordSokoban");
    expectError(await s.send("{not json"), "INVALID_JSON", "Invalid JSON");
    s.ws.send(Buffer.from("{}"), { binary: true });
    expectError(await s.next(), "INVALID_JSON", "binary");
    expectError(await s.send({ type: "jump" }), "UNKNOWN_TYPE", "jump", "reset, step, state, close");
    expectError(await s.send([1, 2]), "VALIDATION_ERROR", '"type"');
    expectError(await s.send({ type: "step", data: { action: "Up" } }), "EXECUTION_ERROR", "reset first");
    const cases: [unknown, string[], (string | number)[]][] = [
      [{ type: "reset", data: { seed: -1 } }, ["data.seed", "-1", "[0, 4294967295]"], ["data", "seed"]],
      [{ type: "reset", data: { seed: 2 ** 32 } }, ["data.seed", "4294967296"], ["data", "seed"]],
      [{ type: "reset", data: { seed: "7" } }, ["data.seed", '"7"'], ["data", "seed"]],
      [{ type: "reset", data: { seed: 1, level: 3 } }, ["data.level", "seed, episode_id"], ["data", "level"]],
      [
        { type: "reset", data: { episode_id: "x".repeat(256) } },
        ["data.episode_id", "255"],
        ["data", "episode_id"],
      ],
      [{ type: "reset", data: [] }, ["data", "object"], ["data"]],
      [{ type: "state", extra: 1 }, ["extra", "allowed: type"], ["extra"]],
    ];
    for (const [message, mentions, loc] of cases) {
      const answer = await s.send(message);
      expectError(answer, "VALIDATION_ERROR", ...mentions);
      expect((answer.data.errors as { loc: unknown }[])[0].loc).toEqual(loc);
    }
    await s.send({ type: "reset", data: { seed: 3 } });
    const stepCases: [unknown, string[]][] = [
      [{ type: "step" }, ["data", "required"]],
      [{ type: "step", data: "Up" }, ["data", '{"action": "Up"}']],
      [{ type: "step", data: {} }, ["data.action", "required"]],
      [{ type: "step", data: { action: 1 } }, ["data.action", "string"]],
      [
        { type: "step", data: { action: "Jump" } },
        ["data.action", '"Jump"', "CoordSokoban", "Up, Down, Left, Right"],
      ],
      [{ type: "step", data: { action: "Up", force: true } }, ["data.force", "action, metadata"]],
    ];
    for (const [message, mentions] of stepCases)
      expectError(await s.send(message), "VALIDATION_ERROR", ...mentions);
    // None of it hurt the episode: it is still at its first step.
    const step = await s.send({ type: "step", data: { action: "Left", metadata: { note: "ok" } } });
    expect(step.data.observation).toMatchObject({
      text: inProcess("CoordSokoban", 3, ["Left"]).steps[0].text,
    });
    expect((await s.send({ type: "state" })).data.step_count).toBe(1);
  });

  it("plays many sessions of several tags at once, each equal to its env in process", async () => {
    const url = await start();
    const plans = Array.from({ length: 48 }, (_, i) => ({
      tag: ["FrozenLake", "CoordFrozenLake", "Bandit"][i % 3],
      seed: 100 + i,
      actions: ["Down", "Right", "Right", "Down", "Left", "Down"],
    }));
    const sessions = await Promise.all(plans.map((p) => Session.open(url, p.tag)));
    const firsts = await Promise.all(
      sessions.map((s, i) => s.send({ type: "reset", data: { seed: plans[i].seed } })),
    );
    // Bandit's arm names come with its first observation; it ends after one pull.
    for (const [i, plan] of plans.entries())
      if (plan.tag === "Bandit")
        plan.actions = [(firsts[i].data.observation as { actions: string[] }).actions[1]];
    const played: Answer[][] = sessions.map(() => []);
    // Steps interleave across sessions: one step of every live session per round.
    for (let round = 0; round < 6; round++) {
      await Promise.all(
        sessions.map(async (s, i) => {
          const action = plans[i].actions[round];
          if (action === undefined || played[i].at(-1)?.data.done) return;
          played[i].push(await s.send({ type: "step", data: { action } }));
        }),
      );
    }
    for (const [i, plan] of plans.entries()) {
      const want = inProcess(plan.tag, plan.seed, plan.actions);
      expect((firsts[i].data.observation as { text: string }).text).toBe(want.first);
      expect(
        played[i].map((a) => [(a.data.observation as { text: string }).text, a.data.reward, a.data.done]),
      ).toEqual(want.steps.map((w) => [w.text, w.reward, w.done]));
    }
    const index = await getJson("/openenv");
    expect(index).toMatchObject({ active_sessions: 48, max_sessions: 1024 });
  });

  it("past max_sessions a new session gets CAPACITY_REACHED and is closed; a freed place is taken again", async () => {
    const url = await start({ openenv: { maxSessions: 2 } });
    const a = await Session.open(url, "FrozenLake");
    await Session.open(url, "Bandit");
    const c = await Session.open(url, "FrozenLake");
    const full = await c.next();
    expectError(full, "CAPACITY_REACHED", "2/2");
    expect(full.data).toMatchObject({ active_sessions: 2, max_sessions: 2 });
    expect((await c.closed).code).toBe(1000);
    a.ws.close();
    await a.closed;
    // The server has seen the close once its own socket has: poll the index, not the clock.
    while ((await getJson("/openenv")).active_sessions !== 1) await new Promise((r) => setTimeout(r, 10));
    const d = await Session.open(url, "FrozenLake");
    expect((await d.send({ type: "reset", data: { seed: 1 } })).type).toBe("observation");
  });
});

describe("the server's protections hold for OpenEnv sessions", () => {
  it("an unknown tag or path is refused at the upgrade with 404 naming the known tags", async () => {
    const url = await start();
    const unknown = await refusal(url, "/openenv/CoordSokobn/ws");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toContain('unknown tag \\"CoordSokobn\\" (did you mean \\"CoordSokoban\\"?)');
    for (const path of ["/ws", "/openenv/%E0%A4%A/ws", "/openenv/Bandit/ws/x"]) {
      const elsewhere = await refusal(url, path);
      expect(elsewhere.status).toBe(404);
      expect(elsewhere.body).toContain("/openenv/TAG/ws");
    }
    // A percent-escaped tag is the tag.
    const s = await Session.open(url, "Coord%53okoban");
    expect((await s.send({ type: "state" })).data.tag).toBe("CoordSokoban");
  });

  it("a server with a token refuses an upgrade without it; with it the session works", async () => {
    const url = await start({ token: "s3cret" });
    expect((await refusal(url, "/openenv/Bandit/ws")).status).toBe(401);
    const s = await Session.open(url, "Bandit", { headers: { authorization: "Bearer s3cret" } });
    expect((await s.send({ type: "reset", data: { seed: 1 } })).type).toBe("observation");
  });

  it("a page of another origin may not open a session or use the HTTP routes", async () => {
    const url = await start();
    expect((await refusal(url, "/openenv/Bandit/ws", { origin: "https://evil.example" })).status).toBe(403);
    const http = await server!.app.inject({
      method: "POST",
      url: "/openenv/Bandit/reset",
      headers: { origin: "https://evil.example", "content-type": "application/json" },
      payload: "{}",
    });
    expect(http.statusCode).toBe(403);
  });

  it("a frame over max_frame_bytes closes its session with 1009", async () => {
    const url = await start({ maxFrameBytes: 1024 });
    const s = await Session.open(url, "Bandit");
    s.ws.send(JSON.stringify({ type: "reset", data: { episode_id: "x".repeat(2000) } }));
    expect((await s.closed).code).toBe(1009);
  });

  it("a socket that never sends a message is closed like a silent rollout socket (4010)", async () => {
    const url = await start({ connections: { helloTimeoutMs: 100 } });
    const s = await Session.open(url, "Bandit");
    expect((await s.closed).code).toBe(4010);
  });

  it("shutdown closes open sessions with 1001", async () => {
    const url = await start();
    const s = await Session.open(url, "Bandit");
    await s.send({ type: "reset", data: { seed: 2 } });
    await server!.shutdown("test over");
    server = null;
    expect(await s.closed).toEqual({ code: 1001, reason: "test over" });
  });
});

// Through fastify's inject: these are plain HTTP routes, no socket needed.
describe("OpenEnv's HTTP routes under /openenv/TAG", () => {
  it("health, metadata, schema and state answer as OpenEnv's do", async () => {
    server = await buildServer();
    const get = (path: string) => getJson(`/openenv/CoordSokoban${path}`);
    expect(await get("/health")).toEqual({ status: "healthy" });
    expect(await get("/metadata")).toMatchObject({ name: "CoordSokoban", version: server!.state.version });
    const schema = await get("/schema");
    expect(Object.keys(schema).sort()).toEqual(["action", "observation", "state"]);
    expect(schema.action.required).toEqual(["action"]);
    expect(await get("/state")).toMatchObject({ episode_id: null, step_count: 0, tag: "CoordSokoban" });
  });

  it("reset answers a fresh env's first observation; step names /ws; bad bodies get 422, unknown tags 404", async () => {
    server = await buildServer();
    const post = (path: string, body: unknown) =>
      server!.app.inject({ method: "POST", url: `/openenv/${path}`, payload: body as object });
    const reset = await post("FrozenLake/reset", { seed: 9 });
    expect(reset.statusCode).toBe(200);
    expect(reset.json()).toMatchObject({
      observation: { text: inProcess("FrozenLake", 9, []).first },
      reward: null,
      done: false,
    });
    const bad = await post("FrozenLake/reset", { seed: 1.5 });
    expect(bad.statusCode).toBe(422);
    expect(bad.json().detail[0]).toMatchObject({ loc: ["body", "seed"], input: 1.5 });
    const step = await post("FrozenLake/step", { action: { action: "Up" } });
    expect(step.statusCode).toBe(409);
    expect(step.json().detail).toContain("/openenv/FrozenLake/ws");
    const badStep = await post("FrozenLake/step", { action: "Up" });
    expect(badStep.statusCode).toBe(422);
    expect(badStep.json().detail[0].loc).toEqual(["body", "action"]);
    const unknown = await post("Frozen/reset", {});
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().detail).toContain("known tags:");
  });
});
