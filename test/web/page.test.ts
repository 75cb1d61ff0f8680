// The web page in Debian's Chromium against the real server: solve a Sokoban level with the
// keyboard, walk into a FrozenLake hole, watch a small rollout arrive group by group with its
// verdicts, and replay an uploaded episode file to its last turn. No console errors anywhere,
// a screenshot per flow, and everything the page loads for these flows weighed.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { launch, openPage, type Watched } from "./browser.ts";
import { writeEpisodes } from "./fixtures.ts";

const TOKEN = "page-token";
/** The budget for all JavaScript and CSS the four flows load, as served. */
const ASSET_BUDGET = 300 * 1024;
const KEY_OF: Record<string, string> = { Up: "ArrowUp", Down: "s", Left: "ArrowLeft", Right: "d" };

let server: RollgymServer;
let url: string;
let browser: Browser;
const assets = new Map<string, number>();
const registry = createRegistry();

beforeAll(async () => {
  server = await buildServer({ token: TOKEN });
  url = await server.listen(0);
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
  await server?.shutdown();
});

async function open(hash: string): Promise<Watched> {
  const watched = await openPage(browser, `${url}/?token=${TOKEN}#/${hash}`);
  return watched;
}

async function finish(watched: Watched, name: string): Promise<void> {
  await watched.screenshot(name);
  for (const [asset, bytes] of watched.assets) assets.set(new URL(asset).pathname, bytes);
  expect(watched.errors).toEqual([]);
  await watched.page.close();
}

/** A SimpleSokoban seed whose shortest solution fits the action budget, and that solution. */
function sokobanLevel(): { seed: number; solution: string[] } {
  const tag = registry.tag("SimpleSokoban");
  for (let seed = 10_000; ; seed++) {
    const env = tag.make();
    env.reset(seed);
    const solution = tag.solve(env)?.actions;
    if (solution && solution.length >= 3 && solution.length <= 6) return { seed, solution };
  }
}

/** A FrozenLake seed and moves that end in a hole (the ice is slippery, but seeded). */
function frozenLakeFall(): { seed: number; moves: string[] } {
  const tag = registry.tag("FrozenLake");
  const names = ["Left", "Down", "Right", "Up"];
  for (let seed = 0; ; seed++) {
    for (let length = 2; length <= 3; length++) {
      for (let code = 0; code < 4 ** length; code++) {
        const moves = Array.from({ length }, (_, i) => names[Math.floor(code / 4 ** i) % 4]);
        const env = tag.make();
        env.reset(seed);
        for (const [i, move] of moves.entries()) {
          const result = env.step(env.actionNames.indexOf(move) + 1);
          if (result.terminated) {
            if (i === moves.length - 1 && !result.info.success) return { seed, moves };
            break;
          }
        }
      }
    }
  }
}

describe("the web page", () => {
  it("serves the page at / with no CDN or external reference", async () => {
    const html = await (await fetch(`${url}/`)).text();
    expect(html).toContain('<script type="module" src="/web/main.ts">');
    expect(html).not.toMatch(/https?:\/\//);
  });

  it("Play: solves a Sokoban level with the keyboard and shows success", async () => {
    const { seed, solution } = sokobanLevel();
    const w = await open(`play?tag=SimpleSokoban&seed=${seed}`);
    await w.page.locator(".board").waitFor();
    await expect.poll(() => w.page.locator("[data-testid=outcome]").textContent()).toBe("Playing");
    // A wrong move and an undo first, then the solution.
    await w.page.keyboard.press("ArrowUp");
    await expect.poll(() => w.page.locator(".moves li").count()).toBe(1);
    await w.page.keyboard.press("u");
    await expect.poll(() => w.page.locator(".moves li").count()).toBe(0);
    for (const move of solution) await w.page.keyboard.press(KEY_OF[move]);
    await expect.poll(() => w.page.locator("[data-testid=outcome]").textContent()).toBe("Success!");
    expect(await w.page.locator(".moves li").count()).toBe(solution.length);
    expect(w.page.url()).toContain(`actions=${solution.join("%2C")}`);
    await finish(w, "play-sokoban-solved");
  });

  it("Play: walks into a FrozenLake hole and shows failure", async () => {
    const { seed, moves } = frozenLakeFall();
    const w = await open(`play?tag=FrozenLake&seed=${seed}`);
    await w.page.locator(".board").waitFor();
    for (const move of moves) await w.page.keyboard.press(KEY_OF[move]);
    await expect
      .poll(() => w.page.locator("[data-testid=outcome]").textContent())
      .toBe("Failed: the episode ended");
    expect(await w.page.locator(".board .lost").count()).toBe(1);
    await finish(w, "play-frozenlake-hole");
  });

  it("Watch: starts a small rollout with the built-in policy and sees every group arrive with its verdict", async () => {
    const w = await open("watch");
    await w.page.getByText("Watching the server's rollouts").waitFor();
    await w.page.locator("#watch-groups").fill("4");
    await w.page.locator("#watch-size").fill("4");
    await w.page.getByRole("button", { name: "Start rollout" }).click();
    const rollout = w.page.locator("section.rollout.mine");
    await expect.poll(() => rollout.locator("[data-testid=progress]").textContent()).toBe("4/4 groups");
    await expect
      .poll(async () => (await rollout.locator("[data-testid=verdict]").allTextContents()).join(","))
      .toMatch(/^(kept|dropped)(,(kept|dropped)){3}$/);
    await rollout.locator(".ep").first().click();
    await w.page.locator(".episode .turn-detail").waitFor();
    await finish(w, "watch-rollout");
  });

  it("Replay: opens an uploaded episode file and steps to the last turn of an episode", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-replay-"));
    const path = join(dir, "run.jsonl");
    const batch = await writeEpisodes(path, [{ tag: "CoordSokoban", groups: 2 }], 4);
    const longest = [...batch.episodes].sort((a, b) => b.turns.length - a.turns.length)[0];

    const w = await open("replay");
    await w.page.locator("#replay-file").setInputFiles(path);
    await w.page.getByText("8 episodes in 2 groups").waitFor();
    await w.page.locator(`.ep:has-text("#${longest.env_id} ")`).click();
    const slider = w.page.getByRole("slider", { name: "Turn" });
    await slider.focus();
    await w.page.keyboard.press("End");
    await expect
      .poll(() => w.page.locator("[data-testid=turn-label]").textContent())
      .toBe(`Final state (after ${longest.turns.length} turns)`);
    expect(w.page.url()).toMatch(new RegExp(`file=upload%3A[0-9a-f]+.*env=${longest.env_id}`));
    await w.screenshot("replay-last-turn");
    // Export: the batch as one self-contained page.
    const [download] = await Promise.all([
      w.page.waitForEvent("download"),
      w.page.getByRole("button", { name: "Export HTML" }).click(),
    ]);
    const html = readFileSync((await download.path())!, "utf8");
    expect(html).toMatch(/^<!doctype html>/);
    expect(html.match(/<summary>Episode #/g)).toHaveLength(8);
    expect(html).not.toMatch(/<script|<link|src=/);
    await finish(w, "replay-exported");
  });

  it("all JavaScript and CSS the four flows loaded, lazy modules included, is under 300 kB as served", () => {
    const total = [...assets.values()].reduce((a, b) => a + b, 0);
    console.log(`web page assets: ${assets.size} files, ${total} bytes`);
    expect([...assets.keys()]).toEqual(
      expect.arrayContaining([
        "/web/main.ts",
        "/web/play-view.ts",
        "/web/watch-view.ts",
        "/web/replay.ts",
        "/web/style.css",
      ]),
    );
    expect(total).toBeLessThan(ASSET_BUDGET);
  });
});
