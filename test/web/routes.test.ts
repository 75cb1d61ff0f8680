// The page's HTTP routes under attack and in normal use: Play's validation and trajectories,
// the static files, the shared directory (no path outside it, no symbolic links, size limits)
// and uploads (checked, size- and count-limited, oldest evicted), all behind the token. Through
// fastify's inject: these are HTTP routes, no socket needed (test/web/hostile.test.ts and the page
// test go over the network).
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EMPTY_FILE_LINES } from "../../bench/episode-lines.ts";
import { createRegistry } from "../../envs/catalog.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";

const TOKEN = "routes-token";
const auth = { authorization: `Bearer ${TOKEN}` };

const { header, summary } = EMPTY_FILE_LINES;
const group = { group_id: 0, tag: "Bandit", seed: 1, env_ids: [], score: null, kept: false, failed: false };
const episodeFile = (padding = "") =>
  `${header}\n${JSON.stringify({ type: "group", ...group, padding })}\n${summary}\n`;

let server: RollgymServer;
let share: string;
let outside: string;

beforeAll(async () => {
  const root = mkdtempSync(join(tmpdir(), "rollgym-share-"));
  share = join(root, "share");
  outside = join(root, "secret.jsonl");
  mkdirSync(share);
  writeFileSync(outside, episodeFile());
  writeFileSync(join(share, "a.jsonl"), episodeFile());
  writeFileSync(join(share, "big.jsonl"), episodeFile("x".repeat(5000)));
  writeFileSync(join(share, "notes.txt"), "not an episode file");
  mkdirSync(join(share, "sub.jsonl"));
  symlinkSync(outside, join(share, "link.jsonl"));
  server = await buildServer({
    token: TOKEN,
    share,
    files: { maxUploads: 2, maxUploadBytes: 4096, maxUploadTotalBytes: 1500, maxSharedBytes: 4096 },
  });
});
afterAll(async () => {
  await server.shutdown();
});

const get = (path: string, headers: Record<string, string> = auth) =>
  server.app.inject({ method: "GET", url: path, headers });
const upload = (body: string, headers: Record<string, string> = auth) =>
  server.app.inject({
    method: "POST",
    url: "/v1/episode-files",
    headers: { ...headers, "content-type": "application/x-ndjson" },
    payload: body,
  });

describe("Play route", () => {
  it("returns the trajectory the env plays, with the prompt and the budget", async () => {
    const res = await get("/v1/envs/SimpleSokoban/play?seed=10&actions=Up,Left");
    expect(res.statusCode).toBe(200);
    const body = res.json();
    const env = createRegistry().tag("SimpleSokoban").make();
    const states = [env.reset(10), env.step(1).observation, env.step(3).observation];
    expect(body).toMatchObject({
      tag: "SimpleSokoban",
      env_type: "sokoban",
      seed: 10,
      budget: 10,
      states,
      done: false,
    });
    expect(body.steps.map((s: { action: string }) => s.action)).toEqual(["Up", "Left"]);
    expect(body.messages[0].role).toBe("system");
    expect(body.messages[1].content).toContain("You have 8 actions left");
  });

  it("reveals a shortest solution that solves the level", async () => {
    const solved = (await get("/v1/envs/SimpleSokoban/play?seed=10&solve=1")).json();
    const played = (
      await get(`/v1/envs/SimpleSokoban/play?seed=10&actions=${solved.solution.join(",")}`)
    ).json();
    expect(played).toMatchObject({ done: true, success: true, end_reason: "done" });
  });

  it("refuses an action after the episode ended, naming it", async () => {
    const solved = (await get("/v1/envs/SimpleSokoban/play?seed=10&solve=1")).json();
    expect(solved.solution.length).toBeLessThan(10);
    const res = await get(
      `/v1/envs/SimpleSokoban/play?seed=10&actions=${[...solved.solution, "Up"].join(",")}`,
    );
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toBe(
      `the episode ended after action ${solved.solution.length}; Up cannot follow`,
    );
  });

  it("ends at the action budget", async () => {
    const tenDowns = Array.from({ length: 10 }, () => "Down").join(",");
    const body = (await get(`/v1/envs/SimpleSokoban/play?seed=10&actions=${tenDowns}`)).json();
    expect(body).toMatchObject({ done: true, success: false, end_reason: "action_budget" });
  });

  it("refuses bad input with a message naming the field", async () => {
    const cases: [string, number, string][] = [
      ["/v1/envs/Nope/play?seed=1", 404, "unknown tag"],
      ["/v1/envs/SimpleSokoban/play?seed=-1", 400, "seed"],
      ["/v1/envs/SimpleSokoban/play?seed=4294967296", 400, "seed"],
      ["/v1/envs/SimpleSokoban/play?seed=1e3", 400, "seed"],
      ["/v1/envs/SimpleSokoban/play?seed=1&actions=Jump", 400, "allowed: Up, Down, Left, Right"],
      [`/v1/envs/SimpleSokoban/play?seed=1&actions=${Array(11).fill("Up").join(",")}`, 400, "budget of 10"],
      ["/v1/envs/Bandit/play?seed=1&actions=x,y", 400, "budget of 1"],
    ];
    for (const [path, status, text] of cases) {
      const res = await get(path);
      expect(res.statusCode, path).toBe(status);
      expect(res.json().error.message, path).toContain(text);
    }
    const bandit = (await get("/v1/envs/Bandit/play?seed=1")).json();
    const res = await get(`/v1/envs/BanditTest/play?seed=1&actions=${bandit.action_names[0]}`);
    expect(res.statusCode).toBe(400);
  });

  it("needs the token (header or ?token=)", async () => {
    expect((await get("/v1/envs/SimpleSokoban/play?seed=1", {})).statusCode).toBe(401);
    expect((await get(`/v1/envs/SimpleSokoban/play?seed=1&token=${TOKEN}`, {})).statusCode).toBe(200);
    expect((await get("/v1/web", { authorization: "Bearer nope" })).statusCode).toBe(401);
  });
});

describe("static files", () => {
  it("serves the page and its modules as JavaScript without types, and nothing else", async () => {
    const page = await get("/", {});
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toContain("text/html");
    const module = await get("/web/play-view.ts", {});
    expect(module.headers["content-type"]).toContain("text/javascript");
    const js = module.body;
    expect(js).not.toMatch(/import type|: PlayResult/);
    expect((await get("/vendor/msgpack/index.mjs", {})).statusCode).toBe(200);
    for (const path of [
      "/web/../app.ts",
      "/web/%2e%2e/app.ts",
      "/web/nope.ts",
      "/vendor/msgpack/../package.json",
    ])
      expect((await get(path, {})).statusCode, path).toBe(404);
  });
});

describe("shared episode files", () => {
  it("lists only regular .jsonl files directly in the shared directory", async () => {
    const body = (await get("/v1/episode-files")).json();
    expect(body.shared).toBe(true);
    expect(body.files.map((f: { name: string }) => f.name).sort()).toEqual(["a.jsonl", "big.jsonl"]);
    expect((await get("/v1/episode-files", {})).statusCode).toBe(401);
  });

  it("serves a listed file and nothing outside the directory", async () => {
    const res = await get("/v1/episode-files/shared/a.jsonl");
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(episodeFile());
    for (const name of [
      "link.jsonl",
      "..%2Fsecret.jsonl",
      "%2E%2E%2Fsecret.jsonl",
      "notes.txt",
      "sub.jsonl",
      "nope.jsonl",
    ])
      expect((await get(`/v1/episode-files/shared/${name}`)).statusCode, name).toBe(404);
    expect((await get(`/v1/episode-files/shared/${encodeURIComponent(outside)}`)).statusCode).toBe(404);
  });

  it("refuses a shared file over the size limit", async () => {
    const res = await get("/v1/episode-files/shared/big.jsonl");
    expect(res.statusCode).toBe(413);
  });
});

describe("uploads", () => {
  it("keeps a checked episode file in memory and serves it back by its id", async () => {
    const res = await upload(episodeFile());
    expect(res.statusCode).toBe(200);
    const { id, episodes } = res.json();
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(episodes).toBe(0);
    expect((await get(`/v1/episode-files/uploads/${id}`)).body).toBe(episodeFile());
  });

  it("refuses what is not an episode file, naming the line", async () => {
    const cases: [string, string][] = [
      ["", "empty"],
      ["not json\n", "line 1: not a JSON line"],
      [`${JSON.stringify({ type: "header", format: "other" })}\n`, "line 1: not a rollgym episode file"],
      [`${header}\n{"type":"weird"}\n${summary}\n`, 'line 2: unknown line type "weird"'],
      [`${header}\n`, "no summary line"],
      [`${header}\n[1,2]\n${summary}\n`, "line 2"],
      // Every field is type-checked by the one reader the CLI and the page use too.
      [
        `${header}\n${JSON.stringify({ type: "group", ...group, group_id: "<img>" })}\n${summary}\n`,
        'line 2: group.group_id: got "<img>", expected an integer ≥ 0',
      ],
    ];
    for (const [body, message] of cases) {
      const res = await upload(body);
      expect(res.statusCode, message).toBe(400);
      const { error } = res.json();
      expect(error.message).toContain(message);
      if (message.includes("group.group_id")) expect(error.field).toBe("group.group_id");
    }
  });

  it("refuses an upload over the size limit and without the token", async () => {
    expect((await upload(episodeFile("x".repeat(5000)))).statusCode).toBe(413);
    expect((await upload(episodeFile(), {})).statusCode).toBe(401);
  });

  it("keeps at most maxUploads files and maxUploadTotalBytes bytes, evicting the oldest", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await upload(episodeFile(String(i)))).json().id);
    expect((await get(`/v1/episode-files/uploads/${ids[0]}`)).statusCode).toBe(404);
    expect((await get(`/v1/episode-files/uploads/${ids[2]}`)).statusCode).toBe(200);
    // A file near the byte budget pushes out everything older.
    const large = (await upload(episodeFile("y".repeat(1100)))).json().id;
    expect((await get(`/v1/episode-files/uploads/${ids[1]}`)).statusCode).toBe(404);
    expect((await get(`/v1/episode-files/uploads/${ids[2]}`)).statusCode).toBe(404);
    expect((await get(`/v1/episode-files/uploads/${large}`)).statusCode).toBe(200);
    expect((await get("/v1/episode-files/uploads/0123", {})).statusCode).toBe(401);
  });
});

describe("a symbolic link swapped into the shared directory", () => {
  it("is never followed, even between the listing and the open", async () => {
    const root = mkdtempSync(join(tmpdir(), "rollgym-swap-"));
    const dir = join(root, "share");
    mkdirSync(dir);
    const secret = join(root, "secret.jsonl");
    writeFileSync(secret, `${header}\nSECRET\n${summary}\n`);
    const real = join(root, "real.jsonl");
    writeFileSync(real, episodeFile());
    const swapped = await buildServer({ share: dir });
    // Flip run.jsonl between a regular file and a link to the secret while requests run.
    const target = join(dir, "run.jsonl");
    let flips = 0;
    let flipping = true;
    const flip = () => {
      if (!flipping) return;
      const next = join(dir, ".next");
      rmSync(next, { force: true });
      if (flips++ % 2) symlinkSync(secret, next);
      else copyFileSync(real, next);
      renameSync(next, target);
      // A flip about every millisecond: often enough to race the requests, seldom enough that
      // some of them find a steady regular file on a loaded machine.
      setTimeout(flip, 1);
    };
    flip();
    let served = 0;
    try {
      for (let i = 0; i < 300; i++) {
        const r = await swapped.app.inject({ method: "GET", url: "/v1/episode-files/shared/run.jsonl" });
        expect(r.body).not.toContain("SECRET");
        if (r.statusCode === 200) served++;
      }
    } finally {
      flipping = false;
      await swapped.shutdown();
    }
    expect(flips).toBeGreaterThan(100);
    expect(served).toBeGreaterThan(0);
  });
});
