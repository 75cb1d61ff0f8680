// Browsers from elsewhere: a page of another origin, or one that rebinds its DNS name to this
// server, cannot open the WebSocket or use the HTTP routes; the page's own origin, configured
// origins and clients that are not browsers (no Origin, no Sec-Fetch-Site) can. Also the
// security headers, and the token checked (and uploads capped) before any body is read.
import { request as httpRequest, type IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { withoutSecrets } from "../../protocol/secret-urls.ts";
import { buildServer, type RollgymServer } from "../../src/server/app.ts";
import { remoteRegistry } from "../helpers/openenv-remote.ts";

let server: RollgymServer;
let url: string;
let port: number;

beforeAll(async () => {
  server = await buildServer({ browsers: { allowOrigins: ["https://lab.example"] } });
  url = await server.listen(0);
  port = Number(new URL(url).port);
});
afterAll(async () => {
  await server.shutdown();
});

/** A raw request with exactly these headers (fetch would add or forbid some). */
function send(
  path: string,
  headers: Record<string, string>,
  options: { method?: string; srv?: string; body?: string; contentLength?: number } = {},
): Promise<{ status: number; headers: IncomingMessage["headers"]; body: string }> {
  const target = new URL(options.srv ?? url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path,
        method: options.method ?? "GET",
        headers: {
          ...headers,
          ...(options.contentLength !== undefined ? { "content-length": options.contentLength } : {}),
        },
        setHost: headers.host === undefined,
      },
      (res) => {
        let body = "";
        res.on("data", (d) => {
          body += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    if (options.body !== undefined) req.end(options.body);
    else if (options.contentLength === undefined) req.end();
    // else: the headers go out and the body never comes.
    else req.flushHeaders();
  });
}

/** Opens the WebSocket with these headers; resolves to "open" or the HTTP status it was refused with. */
function upgrade(headers: Record<string, string>, origin?: string): Promise<string> {
  return new Promise((resolve) => {
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/rollouts`, { headers, origin });
    ws.on("open", () => {
      ws.close();
      resolve("open");
    });
    ws.on("unexpected-response", (_req, res) => resolve(String(res.statusCode)));
    ws.on("error", (error) => resolve(`error ${error.message}`));
  });
}

describe("origin and host checks", () => {
  it("lets clients that are not browsers in, as before", async () => {
    expect(await upgrade({})).toBe("open");
    expect((await send("/v1/web", {})).status).toBe(200);
    expect((await send("/healthz", {})).status).toBe(200);
  });

  it("refuses a page of another origin the WebSocket and every route", async () => {
    const evil = "http://evil.test:9999";
    expect(await upgrade({}, evil)).toBe("403");
    expect(await upgrade({}, "null")).toBe("403");
    // Another port of the same host is another origin.
    expect(await upgrade({}, `http://127.0.0.1:${port + 1}`)).toBe("403");
    for (const path of [
      "/v1/web",
      "/v1/episode-files",
      "/v1/envs/Bandit/play?seed=1&actions=Left",
      "/metrics",
    ]) {
      const r = await send(path, { origin: evil, "sec-fetch-site": "cross-site", "sec-fetch-mode": "cors" });
      expect(r.status, path).toBe(403);
      expect(JSON.parse(r.body).error.message).toMatch(
        /Origin "http:\/\/evil.test:9999" may not use this server/,
      );
    }
    const posted = await send(
      "/v1/episode-files",
      { origin: evil, "content-type": "text/plain" },
      { method: "POST", contentLength: 10_000_000 },
    );
    expect(posted.status).toBe(403);
    expect(posted.headers.connection).toBe("close");
  });

  it("refuses other sites' no-cors requests but not a navigation to the page", async () => {
    const noCors = { "sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors" };
    expect((await send("/v1/episode-files", noCors)).status).toBe(403);
    expect((await send("/v1/episode-files", { "sec-fetch-site": "same-site" })).status).toBe(403);
    const nav = { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate" };
    expect((await send("/", nav)).status).toBe(200);
  });

  it("refuses a page that rebinds its own name to the server (Host not ours)", async () => {
    const rebound = { host: `evil.test:${port}`, "sec-fetch-site": "same-origin", "sec-fetch-mode": "cors" };
    const r = await send("/v1/episode-files", rebound);
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body).error.message).toMatch(
      /Host "evil.test:\d+" is not a name this server is known by/,
    );
    expect(await upgrade({ host: `evil.test:${port}` }, `http://evil.test:${port}`)).toBe("403");
    // Browsers send no marker at all on a same-origin GET to a plain-http name: Host decides.
    expect((await send("/v1/episode-files", { host: `evil.test:${port}` })).status).toBe(403);
  });

  it("lets a trainer's socket (no Origin) and health probes in by any name, even without a token", async () => {
    // Browsers send an Origin on every WebSocket handshake: one without it is not a page's.
    expect(await upgrade({ host: `rollgym.cluster.internal:${port}` })).toBe("open");
    expect((await send("/healthz", { host: `rollgym.cluster.internal:${port}` })).status).toBe(200);
    // Other routes by an unknown name stay refused (a rebinding page's GET looks the same).
    expect((await send("/v1/envs", { host: `rollgym.cluster.internal:${port}` })).status).toBe(403);
  });

  it("lets the page's own origin and configured origins in", async () => {
    const own = `http://127.0.0.1:${port}`;
    expect(await upgrade({}, own)).toBe("open");
    expect(await upgrade({ host: `localhost:${port}` }, `http://localhost:${port}`)).toBe("open");
    expect((await send("/v1/web", { origin: own, "sec-fetch-site": "same-origin" })).status).toBe(200);
    expect((await send("/v1/web", { "sec-fetch-site": "same-origin" })).status).toBe(200);
    // Behind a proxy: the configured origin, by its own name or by ours.
    expect(await upgrade({ host: "lab.example" }, "https://lab.example")).toBe("open");
    expect(await upgrade({}, "https://lab.example")).toBe("open");
    expect((await send("/v1/web", { host: "lab.example", origin: "https://lab.example" })).status).toBe(200);
  });

  it("sends nosniff everywhere and a CSP with frame-ancestors on the page", async () => {
    const health = await send("/healthz", {});
    expect(health.headers["x-content-type-options"]).toBe("nosniff");
    const page = await send("/", {});
    expect(page.headers["x-content-type-options"]).toBe("nosniff");
    const csp = String(page.headers["content-security-policy"]);
    expect(csp).toMatch(/script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    expect(csp).toContain("frame-ancestors 'self' https://lab.example");
    expect(csp).toContain("object-src 'none'");
  });
});

describe("tokens and uploads before any body is read", () => {
  let guarded: RollgymServer;
  let guardedUrl: string;
  beforeAll(async () => {
    guarded = await buildServer({ token: "t0ken", files: { maxConcurrentUploads: 2 } });
    guardedUrl = await guarded.listen(0);
  });
  afterAll(async () => {
    await guarded.shutdown();
  });

  it("refuses an upload without the token before its body arrives", async () => {
    // The body never comes: the answer must not wait for it.
    const r = await send(
      "/v1/episode-files",
      {},
      { method: "POST", srv: guardedUrl, contentLength: 30_000_000 },
    );
    expect(r.status).toBe(401);
    expect(r.headers.connection).toBe("close");
  });

  it("caps the uploads being received at once", async () => {
    const auth = { authorization: "Bearer t0ken", "content-type": "application/x-ndjson" };
    const slow = [0, 1].map(() => {
      const req = httpRequest(`${guardedUrl}/v1/episode-files`, {
        method: "POST",
        headers: { ...auth, "content-length": 1000 },
      });
      req.on("error", () => {});
      req.write("x");
      return req;
    });
    // Both slow uploads count once the server has taken them in (polled: both ways are one-way,
    // they never finish and a destroyed one only gives its place back).
    const upload = () => send("/v1/episode-files", auth, { method: "POST", srv: guardedUrl, body: "{}" });
    await expect.poll(async () => (await upload()).status, { timeout: 10_000 }).toBe(503);
    expect((await upload()).body).toMatch(/max_concurrent_uploads is 2/);
    for (const req of slow) req.destroy();
    await expect.poll(async () => (await upload()).status, { timeout: 10_000 }).toBe(400); // taken in and checked again
  });

  it("lets non-browser clients with the token use any host name", async () => {
    const r = await send(
      "/v1/web",
      { host: "trainer-alias:1", authorization: "Bearer t0ken" },
      { srv: guardedUrl },
    );
    expect(r.status).toBe(200);
    const browser = {
      host: "trainer-alias:1",
      authorization: "Bearer t0ken",
      "sec-fetch-site": "same-origin",
    };
    expect((await send("/v1/web", browser, { srv: guardedUrl })).status).toBe(403);
  });

  it("never logs the token of a request URL", () => {
    expect(withoutSecrets("/v1/web?token=s3cret&x=1")).toBe("/v1/web?token=[redacted]&x=1");
    expect(withoutSecrets("/?a=1&token=s3cret")).toBe("/?a=1&token=[redacted]");
    expect(withoutSecrets("http://me:s3cret@h:8000/openenv/T")).toBe("http://[redacted]@h:8000/openenv/T");
  });

  it("/v1/envs shows a remote tag's URLs without their tokens", async () => {
    const registry = await remoteRegistry("Far", "CoordSokoban", {
      urls: ["http://h:1/openenv/CoordSokoban/t/s3cret", "http://me:s3cret@h:2/x?token=s3cret"],
    });
    const s = await buildServer({ registry });
    try {
      const body = (await s.app.inject({ method: "GET", url: "/v1/envs" })).body;
      expect(body).not.toContain("s3cret");
      expect(body).toContain("http://h:1/openenv/CoordSokoban/t/[redacted]");
    } finally {
      await s.shutdown();
    }
  });
});
