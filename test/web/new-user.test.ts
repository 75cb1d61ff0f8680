// Issue #20 in Chromium: what a new user still hit on the web page. Replay of an interrupted
// run (partial groups), a shared file with a bad field (the one reader's error), and more.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { register as registerNumberLine } from "../../examples/number-line.ts";
import { randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { DEFAULT_FILTER } from "../../src/rollout/filter.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { launch, openPage, type Watched } from "./browser.ts";
import { writeEpisodes, writeInterruptedEpisodes } from "./fixtures.ts";

let server: RollgymServer;
let url: string;
let browser: Browser;
let share: string;

beforeAll(async () => {
  share = join(mkdtempSync(join(tmpdir(), "rollgym-new-user-")), "share");
  mkdirSync(share);
  // Four groups of three; eight episodes finished: groups 0 and 1 whole, group 2 partial.
  await writeInterruptedEpisodes(
    join(share, "interrupted.jsonl"),
    [{ tag: "SimpleSokoban", groups: 4 }],
    3,
    8,
  );
  await writeEpisodes(join(share, "whole.jsonl"), [{ tag: "Bandit", groups: 1 }], 2);
  const lines = readFileSync(join(share, "whole.jsonl"), "utf8").trim().split("\n");
  const episode = JSON.parse(lines[1]);
  episode.turns[0].reward = "<img src=x>";
  lines[1] = JSON.stringify(episode);
  writeFileSync(join(share, "crafted.jsonl"), `${lines.join("\n")}\n`);
  // The first of two actions solves the level (SimpleSokoban seed 10002: Down); the second is
  // skipped because the episode is over, which is no fault.
  const solveThenMore: Policy = {
    name: "solve-then-more",
    generate: async () => ({ text: "Push down.</think><answer>Down || Up</answer>", finishReason: "stop" }),
  };
  await writeEpisodes(join(share, "won.jsonl"), [{ tag: "SimpleSokoban", groups: 1 }], 1, solveThenMore, {
    seed: 10002,
  });
  await writeEpisodes(join(share, "batch.jsonl"), [{ tag: "Bandit", groups: 8 }], 16);
  await writeEpisodes(join(share, "filtered.jsonl"), [{ tag: "Bandit", groups: 4 }], 4, randomPolicy(), {
    filter: { ...DEFAULT_FILTER, strategy: "top_k", value: 0.5 },
  });
  server = await buildServer({ share });
  url = await server.listen(0);
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
  await server?.shutdown();
});

async function open(hash: string, width = 1280): Promise<Watched> {
  const watched = await openPage(browser, `${url}/#/${hash}`);
  await watched.page.setViewportSize({ width, height: 800 });
  return watched;
}

describe("Replay", () => {
  it("shows an interrupted run's partial groups, marked partial, with every finished episode", async () => {
    const w = await open("replay?file=shared%3Ainterrupted.jsonl");
    await w.page
      .getByText("8 episodes in 3 groups (1 partial: the rollout was interrupted by SIGINT")
      .waitFor();
    const verdicts = await w.page.locator("[data-testid=verdict]").allTextContents();
    expect(verdicts.map((v) => v.toLowerCase())).toEqual([
      expect.stringMatching(/kept|dropped/),
      expect.stringMatching(/kept|dropped/),
      "partial",
    ]);
    const partialGroup = w.page.locator('article.group[data-group="2"]');
    expect(await partialGroup.locator(".ep").count()).toBe(2);
    await partialGroup.locator(".ep").first().click();
    await w.page.locator("[data-testid=turn-label]").waitFor();
    expect(w.page.url()).toContain("env=6");
    await w.screenshot("new-user-replay-partial");
    expect(w.errors).toEqual([]);
    await w.page.close();
  });

  it("std and filter score, side by side on a group card, each say what they are", async () => {
    const w = await open("replay?file=shared%3Afiltered.jsonl");
    const card = w.page.locator('article.group[data-group="0"]');
    await card.waitFor();
    expect(await card.locator("abbr", { hasText: /^std$/ }).getAttribute("title")).toMatch(
      /^std: the population/,
    );
    expect(await card.locator("abbr", { hasText: "filter score" }).getAttribute("title")).toContain(
      "so it differs from std",
    );
    await w.page.close();
  });

  it("a shared file with a field of the wrong type is refused, naming the line and the field", async () => {
    const w = await open("replay?file=shared%3Acrafted.jsonl");
    await w.page.getByText('line 2: episode.turns[0].reward: got "<img src=x>", expected a number').waitFor();
    expect(await w.page.locator("img").count()).toBe(0);
    await w.page.close();
  });

  it("a winning turn whose later action was skipped (the puzzle was solved) is not marked invalid", async () => {
    const w = await open("replay?file=shared%3Awon.jsonl&env=0&turn=0");
    await w.page.locator("[data-testid=turn-label]").waitFor();
    await w.page.getByText("Executed").waitFor();
    expect(await w.page.locator(".invalid-mark").count()).toBe(0);
    expect(await w.page.locator(".timeline button.invalid").count()).toBe(0);
    expect(await w.page.locator(".facts").textContent()).toContain("Down, Up");
    await w.screenshot("new-user-replay-won");
    expect(w.errors).toEqual([]);
    await w.page.close();
  });
});

/** The observation the env shows for `tag` and `seed` before any move. */
function firstState(tag: string, seed: number): string {
  return createRegistry().tag(tag).make().reset(seed);
}

describe("Play", () => {
  it("follows the URL: an edited address and Back show the puzzle the URL names", async () => {
    const w = await open("play?tag=SimpleSokoban&seed=5");
    const stateText = w.page.locator(".play pre.state-text");
    await expect.poll(() => stateText.textContent()).toBe(firstState("SimpleSokoban", 5));
    // The user edits the address.
    await w.page.evaluate(() => {
      location.hash = "#/play?tag=FrozenLake&seed=7";
    });
    await expect.poll(() => stateText.textContent()).toBe(firstState("FrozenLake", 7));
    expect(await w.page.locator("#play-tag").inputValue()).toBe("FrozenLake");
    expect(await w.page.locator("#play-seed").inputValue()).toBe("7");
    // A move is made on what the URL names, and the URL keeps naming it.
    await w.page.keyboard.press("ArrowDown");
    await expect.poll(() => w.page.url()).toMatch(/tag=FrozenLake&seed=7&actions=Down$/);
    // Back: the SimpleSokoban level again, not a FrozenLake board under a Sokoban URL.
    await w.page.goBack();
    await expect.poll(() => stateText.textContent()).toBe(firstState("SimpleSokoban", 5));
    expect(await w.page.locator("#play-tag").inputValue()).toBe("SimpleSokoban");
    expect(w.page.url()).toMatch(/tag=SimpleSokoban&seed=5/);
    expect(w.errors).toEqual([]);
    await w.page.close();
  });

  it("says what a link names that it cannot show (an unknown tag, a bad seed)", async () => {
    const w = await open("play?tag=SimpleSokobn&seed=twelve");
    const notice = w.page.getByRole("alert");
    await expect.poll(() => notice.textContent()).toContain('unknown tag "SimpleSokobn" in the link');
    expect(await notice.textContent()).toContain('seed "twelve" in the link is not an integer');
    await w.page.close();
  });
});

describe("keyboard only", () => {
  it("Play: after Enter in the seed box, the arrow keys move (the seed stays)", async () => {
    const w = await open("play?tag=SimpleSokoban&seed=5");
    const stateText = w.page.locator(".play pre.state-text");
    await expect.poll(() => stateText.textContent()).toBe(firstState("SimpleSokoban", 5));
    await w.page.locator("#play-seed").focus();
    await w.page.keyboard.press("Control+A");
    await w.page.keyboard.type("12");
    await w.page.keyboard.press("Enter");
    await expect.poll(() => stateText.textContent()).toBe(firstState("SimpleSokoban", 12));
    await w.page.keyboard.press("ArrowUp");
    await expect.poll(() => w.page.url()).toMatch(/seed=12&actions=Up$/);
    expect(await w.page.locator("#play-seed").inputValue()).toBe("12");
    await w.page.close();
  });

  it("Replay: the 128 episode chips of an 8×16 batch are one Tab stop; arrows move among them", async () => {
    const w = await open("replay?file=shared%3Abatch.jsonl");
    await w.page.getByText("128 episodes in 8 groups").waitFor();
    await w.page.locator("button.ep").first().waitFor();
    // From the top of the page, Tab until the episode's Previous turn button has the focus.
    const focused = () => w.page.evaluate(() => document.activeElement?.getAttribute("aria-label") ?? "");
    let presses = 0;
    while ((await focused()) !== "Previous turn" && presses < 200) {
      await w.page.keyboard.press("Tab");
      presses++;
    }
    expect(await focused()).toBe("Previous turn");
    expect(presses).toBeLessThan(20);
    // Back to the chips (Shift+Tab), then arrows: the next chip takes the focus; Enter opens it.
    while (!(await w.page.evaluate(() => document.activeElement?.classList.contains("ep")))) {
      await w.page.keyboard.press("Shift+Tab");
    }
    expect(await w.page.evaluate(() => document.activeElement?.textContent)).toMatch(/^#0 /);
    await w.page.keyboard.press("ArrowRight");
    expect(await w.page.evaluate(() => document.activeElement?.textContent)).toMatch(/^#1 /);
    await w.page.keyboard.press("Enter");
    await expect.poll(() => w.page.url()).toContain("env=1");
    expect(await w.page.evaluate(() => document.activeElement?.textContent)).toMatch(/^#1 /);
    expect(w.errors).toEqual([]);
    await w.page.close();
  });
});

/** Overflow and overlaps of the page's controls and headings at the current width. */
async function layoutProblems(w: Watched): Promise<string[]> {
  return w.page.evaluate(() => {
    const problems: string[] = [];
    const width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth > width)
      problems.push(`the document is ${document.documentElement.scrollWidth} px wide in ${width}`);
    const boxes = [...document.querySelectorAll<HTMLElement>("button, select, input, a, summary, h2, label")]
      // The skip link waits off-screen until it has the focus, by design.
      .filter((e) => !e.classList.contains("skip"))
      .filter((e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden")
      .map((e) => ({ e, r: e.getBoundingClientRect() }))
      .filter(({ r }) => r.width > 0 && r.height > 0);
    const name = (e: HTMLElement) =>
      `${e.tagName.toLowerCase()} "${(e.textContent ?? "").trim().slice(0, 20)}"`;
    for (const { e, r } of boxes)
      if (r.left < -1 || r.right > width + 1)
        problems.push(`${name(e)} is off-screen (${r.left}..${r.right})`);
    for (const [i, a] of boxes.entries())
      for (const b of boxes.slice(i + 1)) {
        // A control inside another (an input in its label) is not an overlap.
        if (a.e.contains(b.e) || b.e.contains(a.e)) continue;
        const x = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
        const y = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
        if (x > 1 && y > 1) problems.push(`${name(a.e)} overlaps ${name(b.e)}`);
      }
    return problems;
  });
}

describe("phone, tablet and desktop widths", () => {
  const WIDTHS = [375, 768, 1024, 1100, 1280];
  const PAGES = [
    "play?tag=SimpleSokoban&seed=5",
    "play?tag=FrozenLake&seed=7&actions=Down",
    "play?tag=Bandit&seed=1",
    "watch",
    "watch?start",
    "replay?file=shared%3Abatch.jsonl&env=3",
  ];
  it.each(PAGES)("%s: no horizontal overflow and no overlapping controls", async (hash) => {
    const w = await open(hash);
    await w.page
      .locator(hash.startsWith("replay") ? "[data-testid=turn-label]" : "main button")
      .first()
      .waitFor();
    if (hash === "watch?start") {
      // A rollout under way: its group cards, charts and an episode opened.
      await w.page.getByRole("button", { name: "Start rollout" }).click();
      await w.page.locator("button.ep").first().click();
      await w.page.locator("[data-testid=turn-label]").waitFor();
    }
    await w.page.waitForLoadState("networkidle");
    const problems: string[] = [];
    for (const width of WIDTHS) {
      await w.page.setViewportSize({ width, height: 800 });
      await w.page.evaluate(() => new Promise(requestAnimationFrame));
      problems.push(...(await layoutProblems(w)).map((p) => `${width} px: ${p}`));
      await w.screenshot(
        `width-${hash
          .split(/[?&]/)
          .slice(0, 2)
          .join("-")
          .replace(/[^\w-]/g, "")}-${width}`,
      );
    }
    expect(problems).toEqual([]);
    expect(w.errors).toEqual([]);
    await w.page.close();
  });
});

describe("a custom env (a plugin's) on the web page", () => {
  it("NumberLine is played on its text, with a button and a number key per action", async () => {
    const registry = createRegistry();
    registerNumberLine(registry);
    const own = await buildServer({ registry });
    const ownUrl = await own.listen(0);
    try {
      const w = await openPage(browser, `${ownUrl}/#/play?tag=NumberLine&seed=1`);
      const board = w.page.getByLabel("Board");
      const env = registry.tag("NumberLine").make();
      await expect.poll(() => board.textContent()).toBe(env.reset(1));
      // Its actions (Left, Right) are directions: the pad plays them, arrows too.
      const right = w.page.locator(".pad button.right");
      expect(await right.isEnabled()).toBe(true);
      await right.click();
      await expect.poll(() => board.textContent()).toBe(env.step(2).observation);
      await w.page.keyboard.press("ArrowLeft");
      await expect.poll(() => board.textContent()).toBe(env.step(1).observation);
      // Number keys play the numbered actions: 2 is Right.
      await w.page.keyboard.press("2");
      await expect.poll(() => board.textContent()).toBe(env.step(2).observation);
      expect(decodeURIComponent(w.page.url())).toContain("actions=Right,Left,Right");
      expect(await w.page.getByText("(no picture for this state)").count()).toBe(0);
      await w.screenshot("new-user-custom-env");
      expect(w.errors).toEqual([]);
      await w.page.close();
    } finally {
      await own.shutdown();
    }
  });
});

describe("pictures", () => {
  it("a board scaled to a fractional cell size shows no seams between wall tiles", async () => {
    const w = await open("play?tag=SimpleSokoban&seed=5");
    const board = w.page.locator(".board-holder svg.board");
    await board.waitFor();
    // 1024 px wide: the board is 294.5 px for 6 cells, so tile edges fall between pixels.
    await w.page.setViewportSize({ width: 1024, height: 800 });
    await w.page.evaluate(() => new Promise(requestAnimationFrame));
    expect(firstState("SimpleSokoban", 5).split("\n")[0]).toBe("######");
    const box = (await board.boundingBox())!;
    // The top row is all wall: brown tiles (R 107) and darker bricks; a seam lets the page
    // through as a lighter line.
    const png = await w.page.screenshot({
      clip: { x: box.x + 2, y: box.y + 2, width: box.width - 4, height: box.height / 6 - 4 },
    });
    const light = await w.page.evaluate(async (base64) => {
      const image = new Image();
      image.src = `data:image/png;base64,${base64}`;
      await image.decode();
      const canvas = document.createElement("canvas");
      canvas.width = image.width;
      canvas.height = image.height;
      const context = canvas.getContext("2d")!;
      context.drawImage(image, 0, 0);
      const { data } = context.getImageData(0, 0, image.width, image.height);
      let count = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i] >= 120) count++;
      return count;
    }, png.toString("base64"));
    expect(light).toBe(0);
    await w.page.close();
  });
});
