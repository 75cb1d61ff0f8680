// Watch and Replay in Debian's Chromium against the real server: an endless stream shows its
// last windows with their verdicts, versions and ages and lets older ones go, and on a phone a
// tapped episode is brought into view (it stacks below the group cards, out of sight).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Locator } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { KEPT_WINDOWS } from "../../src/server/web/client/windows.ts";
import { type Frame, TestClient, until } from "../helpers/ws-client.ts";
import { launch, openPage, PHONE, type Watched } from "./browser.ts";
import { writeEpisodes } from "./fixtures.ts";

const TOKEN = "watch-page-token";
const PER_WINDOW = 2;

let server: RollgymServer;
let url: string;
let browser: Browser;

beforeAll(async () => {
  server = await buildServer({ token: TOKEN });
  url = await server.listen(0);
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
  await server?.shutdown();
});

async function finish(watched: Watched, name: string): Promise<void> {
  await watched.screenshot(name);
  expect(watched.errors).toEqual([]);
  await watched.page.close();
}

/** Whether the element's top edge shows in the page's viewport (a scroll may leave it a fraction of a pixel above). */
const topInView = (locator: Locator): Promise<boolean> =>
  locator.evaluate((el) => {
    const { top } = el.getBoundingClientRect();
    return top > -1 && top < window.innerHeight;
  });

/**
 * A trainer's endless stream of PER_WINDOW CoordSokoban groups a window, every group
 * acknowledged: one weight update after its second window, cancelled `more` windows later.
 * Resolves to the trainer's window frames.
 */
async function endlessRun(more: number): Promise<Frame[]> {
  const trainer = await TestClient.connect(url, {
    token: TOKEN,
    hello: { type: "hello", protocol: 1, client: "page-trainer", role: "trainer" },
  });
  try {
    trainer.ws.on("message", () => {
      const f = trainer.received.at(-1)!;
      if (f.type === "group") trainer.send({ type: "ack", rollout: "forever", groups: [f.group] });
    });
    trainer.send({ type: "credit", groups: 100_000 });
    trainer.send({
      type: "rollout",
      id: "forever",
      tags: [{ tag: "CoordSokoban", groups: PER_WINDOW }],
      mode: "train",
      group_size: 2,
      seed: 77,
      delivery: "stream",
      endless: true,
    });
    await until(() => trainer.of("window").length >= 2);
    trainer.send({ type: "begin_update", id: "u1" });
    await trainer.next((f) => f.type === "update_begun");
    trainer.send({ type: "end_update", id: "u1", version: { label: "step-1", ordinal: 1 } });
    await trainer.next((f) => f.type === "update_ended");
    const after = trainer.of("window").length;
    await until(() => trainer.of("window").length >= after + more);
  } finally {
    trainer.send({ type: "cancel", rollout: "forever" });
    await trainer.next((f) => f.type === "batch");
    trainer.send({ type: "ack", rollout: "forever", groups: [], batch: true });
    trainer.close();
  }
  return trainer.of("window");
}

describe("Watch and Replay in the browser", () => {
  it("Watch: an endless stream shows its last windows with verdicts, versions and ages, bounded", async () => {
    const w = await openPage(browser, `${url}/?token=${TOKEN}#/watch`);
    await w.page.getByText("Watching the server's rollouts").waitFor();
    // Twice the bound of windows after the update: the first ones must fall off.
    const windows = await endlessRun(2 * KEPT_WINDOWS);
    expect(windows.length).toBeGreaterThan(2 * KEPT_WINDOWS);
    const section = w.page.locator(`section.rollout[data-rollout="forever"]`);
    await expect
      .poll(() => section.locator("[data-testid=progress]").textContent())
      .toMatch(new RegExp(` · ${windows.length} windows$`));
    await section.getByText(/· done/).waitFor();

    // The last KEPT_WINDOWS windows, newest first, each with the trainer's verdict counts.
    const shown = section.locator("[data-testid=window]");
    expect(await shown.count()).toBe(KEPT_WINDOWS);
    const last = [...windows]
      .sort((a, b) => (b.window as number) - (a.window as number))
      .slice(0, KEPT_WINDOWS);
    for (const [i, frame] of last.entries()) {
      const item = shown.nth(i);
      expect(await item.getAttribute("data-window")).toBe(String(frame.window));
      const text = await item.textContent();
      const judged = [...(frame.kept as number[]), ...(frame.dropped as number[])];
      expect(text).toContain(`${(frame.kept as number[]).length} kept`);
      expect(text).toContain(`${(frame.dropped as number[]).length} dropped`);
      // The cancel fails the last window's groups: those it stopped before they started have no
      // age; one that had started (a loaded machine) has one if it played a turn.
      const failed = frame.failed_groups as number[];
      expect(text).toContain(failed.length ? `${failed.length} failed` : "dropped · ");
      const notStarted = new Set((frame.not_started as number[] | undefined) ?? []);
      const startedFailed = failed.filter((g) => !notStarted.has(g)).length;
      // Every kept window came after the update, and its groups were played after it too.
      if (judged.length > 0) expect(text).toContain("version step-1 (v1) · ages 0");
      else if (startedFailed === 0) expect(text).toContain("version step-1 (v1) · ages –");
      else expect(text).toMatch(/version step-1 \(v1\) · ages (0|–)/);
    }
    expect(await section.textContent()).toContain(
      `the last ${KEPT_WINDOWS} and their groups are kept (${windows.length - KEPT_WINDOWS} older let go)`,
    );

    // Group cards: only the kept windows' groups, each with its window's verdict, version and age.
    const verdictOf = new Map<number, string>();
    for (const frame of last) {
      for (const g of frame.kept as number[]) verdictOf.set(g, "kept");
      for (const g of frame.dropped as number[]) verdictOf.set(g, "dropped");
      for (const g of frame.failed_groups as number[]) verdictOf.set(g, "failed");
    }
    const cards = section.locator("article.group");
    expect(await cards.count()).toBeGreaterThan(0);
    expect(await cards.count()).toBeLessThanOrEqual(KEPT_WINDOWS * PER_WINDOW);
    for (const card of await cards.all()) {
      const group = Number(await card.getAttribute("data-group"));
      expect(verdictOf.has(group), `group ${group} is of a kept window`).toBe(true);
      expect(await card.locator("[data-testid=verdict]").textContent()).toBe(verdictOf.get(group));
      if (verdictOf.get(group) !== "failed")
        expect(await card.locator("[data-testid=group-version]").textContent()).toBe(" v1 · age 0");
    }
    await finish(w, "watch-endless");
  });

  it("Watch on a phone: tapping an episode brings it into view", async () => {
    const w = await openPage(browser, `${url}/?token=${TOKEN}#/watch`, PHONE);
    await w.page.getByText("Watching the server's rollouts").waitFor();
    await w.page.locator("#watch-groups").fill("8");
    await w.page.locator("#watch-size").fill("4");
    await w.page.getByRole("button", { name: "Start rollout" }).tap();
    const rollout = w.page.locator("section.rollout.mine");
    await expect.poll(() => rollout.locator("[data-testid=progress]").textContent()).toBe("8/8 groups");
    await rollout.getByText(/· done/).waitFor();
    const chip = rollout.locator(".ep").first();
    await chip.scrollIntoViewIfNeeded();
    await chip.tap();
    const episode = w.page.locator(".episode-panel .episode");
    await episode.waitFor();
    expect(await topInView(episode)).toBe(true);
    await finish(w, "watch-phone-tap");
  });

  it("Replay on a phone: tapping an episode brings it into view", async () => {
    const path = join(mkdtempSync(join(tmpdir(), "rollgym-phone-")), "run.jsonl");
    await writeEpisodes(path, [{ tag: "CoordSokoban", groups: 6 }], 4);
    const w = await openPage(browser, `${url}/?token=${TOKEN}#/replay`, PHONE);
    await w.page.locator("#replay-file").setInputFiles(path);
    await w.page.getByText("24 episodes in 6 groups").waitFor();
    const episode = w.page.locator(".episode-panel .episode");
    await episode.waitFor();
    // The first episode opens with the file, below the group cards.
    expect(await topInView(episode)).toBe(false);
    await w.page.locator(".ep").nth(1).tap();
    await expect.poll(() => w.page.locator(".ep").nth(1).getAttribute("aria-pressed")).toBe("true");
    expect(await topInView(episode)).toBe(true);
    await finish(w, "replay-phone-tap");
  });
});
