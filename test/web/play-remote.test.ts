// Play with a remote tag (env_type openenv) in the catalogue, in Debian's Chromium: picking it
// empties the board and says what to do instead, rather than leaving the previous puzzle drawn
// under the new tag's name; a link to it does the same; picking an in-process tag plays again.
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { FakeOpenEnv, remoteRegistry } from "../helpers/openenv-remote.ts";
import { launch, openPage, type Watched } from "./browser.ts";

let server: RollgymServer;
let walk: FakeOpenEnv;
let url: string;
let browser: Browser;

beforeAll(async () => {
  walk = await FakeOpenEnv.start({ kind: "none" });
  const registry = await remoteRegistry("RemoteWalk", "CoordSokoban", { url: walk.base });
  server = await buildServer({ registry });
  url = await server.listen(0);
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
  await server?.shutdown();
  await walk?.stop();
});

const NOTE = "RemoteWalk runs on a remote OpenEnv server (env_type openenv), which this page does not step.";

async function finish(w: Watched, name: string): Promise<void> {
  await w.screenshot(name);
  expect(w.errors).toEqual([]);
  await w.page.close();
}

describe("Play and remote tags", () => {
  it("picking a remote tag empties the board and says why; picking a local tag plays again", async () => {
    const w = await openPage(browser, `${url}/#/play?tag=SimpleSokoban&seed=3`);
    await w.page.locator(".board").waitFor();
    await w.page.locator("#play-tag").selectOption("RemoteWalk");
    await expect.poll(() => w.page.locator("[data-testid=remote]").textContent()).toContain(NOTE);
    expect(await w.page.locator(".board").count()).toBe(0);
    expect(await w.page.locator(".state-text").textContent()).toBe("");
    expect(await w.page.locator(".moves li").count()).toBe(0);
    expect(w.page.url()).toContain("tag=RemoteWalk");
    // Keys do nothing while no puzzle is shown.
    await w.page.keyboard.press("ArrowUp");
    expect(await w.page.locator(".moves li").count()).toBe(0);
    await w.screenshot("play-remote-tag");

    await w.page.locator("#play-tag").selectOption("SimpleSokoban");
    await w.page.locator(".board").waitFor();
    expect(await w.page.locator("[data-testid=remote]").count()).toBe(0);
    await finish(w, "play-local-after-remote");
  });

  it("a link to a remote tag shows the note, with no board", async () => {
    const w = await openPage(browser, `${url}/#/play?tag=RemoteWalk&seed=7`);
    await expect
      .poll(() => w.page.locator("[data-testid=remote]").textContent())
      .toContain("rollgym envs prompt RemoteWalk --seed 7");
    expect(await w.page.locator(".board").count()).toBe(0);
    await finish(w, "play-remote-link");
  });
});
