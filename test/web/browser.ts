// Debian's Chromium driven by playwright-core, for the page's browser tests: console errors
// and every JavaScript and CSS response are recorded, screenshots go to test/web/screenshots/.
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { ROOT } from "../helpers/cli.ts";

export const CHROMIUM = process.env.ROLLGYM_CHROMIUM ?? "/usr/bin/chromium";
export const SCREENSHOTS = join(ROOT, "test", "web", "screenshots");

/** `extraArgs`: more Chromium switches (e.g. --host-resolver-rules to give 127.0.0.1 a name). */
export async function launch(extraArgs: readonly string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `no Chromium at ${CHROMIUM}: apt-get install chromium (.ci/run does), or set ROLLGYM_CHROMIUM`,
    );
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...extraArgs,
    ],
  });
}

export interface Watched {
  page: Page;
  /** Console errors and uncaught exceptions, in order. */
  errors: string[];
  /** Bytes of every JavaScript and CSS response, by URL. */
  assets: Map<string, number>;
  screenshot(name: string): Promise<string>;
}

/** A phone's screen, touch included (a common 6.1-inch phone's CSS pixels). */
export const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true } as const;

/** `screen`: the page's viewport and touch (default a laptop screen). */
export async function openPage(
  browser: Browser,
  url: string,
  screen: { viewport: { width: number; height: number }; isMobile?: boolean; hasTouch?: boolean } = {
    viewport: { width: 1366, height: 768 },
  },
): Promise<Watched> {
  const page = await browser.newPage(screen);
  const errors: string[] = [];
  const assets = new Map<string, number>();
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  page.on("pageerror", (error) => errors.push(error.message));
  page.on("response", async (response) => {
    const type = response.headers()["content-type"] ?? "";
    if (!/javascript|css/.test(type)) return;
    const body = await response.body().catch(() => null);
    if (body) assets.set(response.url(), body.byteLength);
  });
  await page.goto(url);
  mkdirSync(SCREENSHOTS, { recursive: true });
  return {
    page,
    errors,
    assets,
    async screenshot(name) {
      const path = join(SCREENSHOTS, `${name}.png`);
      await page.screenshot({ path, fullPage: true });
      return path;
    },
  };
}
