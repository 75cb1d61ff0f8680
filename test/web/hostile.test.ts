// Hostile pages and files in Debian's Chromium (issue 19): a page of another origin can neither
// open the WebSocket nor use the HTTP routes of a default server, while the page itself works,
// also reached by a configured origin; and a crafted episode file with markup in every string
// and number field runs no script and injects no element in Replay, in Watch (markup in the
// model's answers), in the page's own export, or in `rollgym export --format html|svg`.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { oraclePolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { rollgym } from "../helpers/cli.ts";
import { launch, openPage } from "./browser.ts";
import { writeEpisodes } from "./fixtures.ts";

/** Markup that, if ever parsed, leaves a `.pwned` element and (without CSP) runs a handler. */
const payload = (id: string) =>
  `"'><img class="pwned" src="data:," onerror="(window.__pwned=window.__pwned||[]).push('${id}')"><svg class="pwned" onload="(window.__pwned=window.__pwned||[]).push('${id}')"></svg><b class="pwned">${id}</b>`;

/** The fields of an episode file `pick` names replaced by markup, except what makes it one. */
function craft(text: string, pick: (value: unknown, key: string) => boolean): string {
  let n = 0;
  const walk = (value: unknown, key: string): unknown => {
    if (key === "type" || key === "format" || key === "version") return value;
    if ((typeof value === "string" || typeof value === "number") && pick(value, key))
      return payload(`${key}${n++}`);
    if (Array.isArray(value)) return value.map((v) => walk(v, key));
    if (value !== null && typeof value === "object")
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k)]));
    return value;
  };
  return text
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => JSON.stringify(walk(JSON.parse(line), "")))
    .join("\n")
    .concat("\n");
}

/** What a page let through: injected elements, and handlers that ran. */
async function injected(page: Page): Promise<{ elements: number; ran: unknown }> {
  return page.evaluate(() => ({
    elements: document.querySelectorAll(".pwned").length,
    ran: (window as unknown as { __pwned?: unknown }).__pwned ?? null,
  }));
}

let dir: string;
let plain: string;
type Kind = "strings" | "everything" | "group_id";
const crafted: Record<Kind, string> = { strings: "", everything: "", group_id: "" };
const KINDS: Record<Kind, [string, (value: unknown, key: string) => boolean]> = {
  strings: ["every string field", (value) => typeof value === "string"],
  everything: ["every string and number field", () => true],
  // Only the group ids: the rest of the file is sound, so every view draws it to the end.
  group_id: ["the group ids", (_value, key) => key === "group_id"],
};
let browser: Browser;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "rollgym-hostile-"));
  plain = join(dir, "plain.jsonl");
  await writeEpisodes(
    plain,
    [
      { tag: "SimpleSokoban", groups: 2 },
      { tag: "Bandit", groups: 1 },
    ],
    2,
  );
  const text = readFileSync(plain, "utf8");
  for (const [kind, [, pick]] of Object.entries(KINDS)) {
    crafted[kind as Kind] = join(dir, `${kind}.jsonl`);
    writeFileSync(crafted[kind as Kind], craft(text, pick));
  }
  browser = await launch(["--host-resolver-rules=MAP lab.test 127.0.0.1, MAP evil.test 127.0.0.1"]);
});
afterAll(async () => {
  await browser?.close();
});

describe("a page of another origin", () => {
  let server: RollgymServer;
  let url: string;
  let evil: Server;
  let evilUrl: string;

  beforeAll(async () => {
    server = await buildServer({ share: dir });
    url = await server.listen(0);
    // The attacker's page, served from another origin.
    evil = createServer((_req, res) => {
      res.setHeader("content-type", "text/html");
      res.end("<!doctype html><title>evil</title>");
    });
    await new Promise<void>((r) => evil.listen(0, "127.0.0.1", r));
    evilUrl = `http://evil.test:${(evil.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    evil.close();
    await server.shutdown();
  });

  it("can neither open the WebSocket nor use the HTTP routes; the page itself still works", async () => {
    const w = await openPage(browser, `${evilUrl}/`);
    const target = url.replace("127.0.0.1", "localhost");
    const seen = await w.page.evaluate(async (server) => {
      const ws = await new Promise<string>((resolve) => {
        const socket = new WebSocket(`${server.replace(/^http/, "ws")}/v1/rollouts`);
        socket.onopen = () => resolve("open");
        socket.onclose = (e) => resolve(`closed ${e.code}`);
      });
      const statusOf = (init: RequestInit, path: string) =>
        fetch(`${server}${path}`, init).then(
          (r) => (r.type === "opaque" ? "opaque" : String(r.status)),
          (e: Error) => `failed: ${e.name}`,
        );
      return {
        ws,
        web: await statusOf({}, "/v1/web"),
        files: await statusOf({}, "/v1/episode-files"),
        shared: await statusOf({}, "/v1/episode-files/shared/plain.jsonl"),
        play: await statusOf({}, "/v1/envs/Bandit/play?seed=1&actions=Left"),
        upload: await statusOf(
          { method: "POST", mode: "no-cors", body: "{}", headers: { "content-type": "text/plain" } },
          "/v1/episode-files",
        ),
      };
    }, target);
    // The browser hides the answers from the page; the server's own refusals are checked below.
    expect(seen.ws).toBe("closed 1006");
    for (const k of ["web", "files", "shared", "play"] as const) expect(seen[k]).toBe("failed: TypeError");
    await w.page.close();
    // What the server answered those requests (the same headers Chromium sent).
    const origin = { origin: evilUrl, "sec-fetch-site": "cross-site" };
    for (const path of ["/v1/web", "/v1/episode-files/shared/plain.jsonl"])
      expect((await fetch(`${url}${path}`, { headers: origin })).status).toBe(403);

    // The page itself, opened directly, still plays, lists the shared files and watches.
    const own = await openPage(browser, `${url}/#/replay`);
    await own.page.getByText("plain.jsonl").waitFor();
    await own.page.goto(`${url}/#/watch`);
    await own.page.getByText("Watching the server's rollouts").waitFor();
    expect(own.errors).toEqual([]);
    await own.page.close();
  });

  it("reached by another name, works only when that origin is configured", async () => {
    const refused = await openPage(browser, url.replace("127.0.0.1", "lab.test"));
    expect(await refused.page.textContent("body")).toMatch(
      /Host .*lab\.test.* is not a name this server is known by/,
    );
    await refused.page.close();

    // A server with that origin configured (the port chosen first, so the origin can name it).
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as { port: number }).port;
    await new Promise((r) => probe.close(r));
    const lab = await buildServer({ browsers: { allowOrigins: [`http://lab.test:${port}`] } });
    await lab.listen(port);
    try {
      const w = await openPage(browser, `http://lab.test:${port}/#/watch`);
      await w.page.getByText("Watching the server's rollouts").waitFor();
      await w.page.locator("#watch-groups").fill("2");
      await w.page.locator("#watch-size").fill("2");
      await w.page.getByRole("button", { name: "Start rollout" }).click();
      await expect
        .poll(() => w.page.locator("section.rollout.mine [data-testid=progress]").textContent())
        .toBe("2/2 groups");
      expect(w.errors).toEqual([]);
      await w.page.close();
    } finally {
      await lab.shutdown();
    }
  });
});

describe("a crafted episode file", () => {
  let server: RollgymServer;
  let url: string;

  beforeAll(async () => {
    // The model answers with markup too, for Watch.
    const oracle = oraclePolicy();
    const markupPolicy: Policy = {
      name: "markup",
      async generate(request) {
        const answer = await oracle.generate(request);
        return { ...answer, text: `${payload("answer")}${answer.text}` };
      },
    };
    server = await buildServer({ share: dir, policy: markupPolicy });
    url = await server.listen(0);
  });
  afterAll(async () => {
    await server.shutdown();
  });

  for (const [kind, [what]] of Object.entries(KINDS) as [Kind, (typeof KINDS)[Kind]][]) {
    it(`with markup in ${what}: Replay injects nothing`, async () => {
      const name = `${kind}.jsonl`;
      const w = await openPage(browser, `${url}/#/replay?file=shared:${name}`);
      await w.page.waitForTimeout(500);
      const episodes = w.page.locator(".ep");
      if ((await episodes.count()) > 0) {
        await episodes.first().click();
        const slider = w.page.getByRole("slider", { name: "Turn" });
        if (await slider.count()) {
          await slider.focus();
          await w.page.keyboard.press("End");
        }
      }
      expect(await injected(w.page)).toEqual({ elements: 0, ran: null });
      // Upload it too, and export it from the page.
      await w.page.goto(`${url}/#/replay`);
      await w.page.locator("#replay-file").setInputFiles(crafted[kind]);
      await w.page.waitForTimeout(500);
      expect(await injected(w.page)).toEqual({ elements: 0, ran: null });
      const exportButton = w.page.getByRole("button", { name: "Export HTML" });
      if (await exportButton.count()) {
        const [download] = await Promise.all([w.page.waitForEvent("download"), exportButton.click()]);
        const exported = await browser.newPage();
        await exported.goto(`file://${await download.path()}`);
        expect(await injected(exported)).toEqual({ elements: 0, ran: null });
        await exported.close();
      }
      await w.page.close();
    });

    it(`with markup in ${what}: rollgym export html and svg inject nothing`, async () => {
      for (const format of ["html", "svg"]) {
        const out = join(dir, `${kind}.${format}`);
        const result = await rollgym(["export", crafted[kind], "--format", format, "--out", out]);
        if (result.code !== 0) {
          // Refused as a bad file is fine too; it must say why.
          expect(result.stderr).not.toBe("");
          continue;
        }
        if (format === "html") expect(readFileSync(out, "utf8")).toContain("Content-Security-Policy");
        const page = await browser.newPage();
        await page.goto(`file://${out}`);
        expect(await injected(page), `${kind}.${format}`).toEqual({ elements: 0, ran: null });
        await page.close();
      }
    });
  }

  it("with markup in the model's answers: Watch injects nothing", async () => {
    const w = await openPage(browser, `${url}/#/watch`);
    await w.page.getByText("Watching the server's rollouts").waitFor();
    await w.page.locator("#watch-groups").fill("2");
    await w.page.locator("#watch-size").fill("2");
    await w.page.getByRole("button", { name: "Start rollout" }).click();
    const rollout = w.page.locator("section.rollout.mine");
    await expect.poll(() => rollout.locator("[data-testid=progress]").textContent()).toBe("2/2 groups");
    await rollout.locator(".ep").first().click();
    await w.page.locator(".episode .turn-detail").waitFor();
    expect(await w.page.locator(".episode").textContent()).toContain('class="pwned"');
    expect(await injected(w.page)).toEqual({ elements: 0, ran: null });
    await w.page.close();
  });
});
