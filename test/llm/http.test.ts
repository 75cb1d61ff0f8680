// The engine HTTP client against a bare HTTP server: error bodies in both vLLM shapes,
// Retry-After, timeouts, aborts and refused connections, and no listener left on a
// long-lived signal however many requests it carries.
import { getEventListeners, once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deadline } from "../../src/llm/deadline.ts";
import { EngineConnections, EngineError, requestJson } from "../../src/llm/http.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import { PolicyError } from "../../src/llm/policy.ts";
import { failure } from "../helpers/failure.ts";
import { singleRequest } from "../helpers/recording-policy.ts";

let server: Server;
let base: string;
let served = 0;

const answer = JSON.stringify({
  choices: [
    { message: { role: "assistant", content: "x</think><answer>Up</answer>" }, finish_reason: "stop" },
  ],
  usage: { prompt_tokens: 5, completion_tokens: 3 },
});

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      served++;
      const send = (status: number, body: string, headers: Record<string, string> = {}) => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(body);
      };
      if (req.url?.startsWith("/hang")) return; // never answers
      switch (req.url) {
        case "/nested":
          return send(400, JSON.stringify({ error: { message: "max_tokens is too large", code: 400 } }));
        case "/flat":
          return send(400, JSON.stringify({ object: "error", message: "prompt too long", code: 400 }));
        case "/busy":
          return send(503, "", { "retry-after": "7" });
        case "/text":
          return send(200, "<html>not json</html>");
        default:
          return send(200, answer);
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

describe("requestJson", () => {
  const options = { timeoutMs: 5_000 };

  it("reads the message of vLLM's nested and flat error bodies", async () => {
    const nested = await failure(requestJson("POST", `${base}/nested`, {}, options));
    expect(nested).toBeInstanceOf(EngineError);
    expect(nested).toMatchObject({
      message: "HTTP 400: max_tokens is too large",
      status: 400,
      retryable: false,
    });
    const flat = await failure(requestJson("POST", `${base}/flat`, {}, options));
    expect(flat).toMatchObject({ message: "HTTP 400: prompt too long", status: 400 });
  });

  it("keeps Retry-After and says when a 2xx body is not JSON", async () => {
    const busy = await failure(requestJson("GET", `${base}/busy`, undefined, options));
    expect(busy).toMatchObject({
      message: "HTTP 503: (no body)",
      status: 503,
      retryAfterS: 7,
      retryable: true,
    });
    const text = await failure(requestJson("GET", `${base}/text`, undefined, options));
    expect(text).toMatchObject({ status: 502 });
    expect((text as Error).message).toContain("the body is not JSON (<html>not json</html>)");
  });

  it("times out with an EngineError and rethrows the caller's abort reason unchanged", async () => {
    const timedOut = await failure(requestJson("GET", `${base}/hang`, undefined, { timeoutMs: 100 }));
    expect(timedOut).toMatchObject({
      message: "request timed out after 0.1 s",
      status: null,
      retryable: true,
    });
    const controller = new AbortController();
    const reason = new Error("rollout cancelled");
    const pending = failure(
      requestJson("GET", `${base}/hang`, undefined, { ...options, signal: controller.signal }),
    );
    setTimeout(() => controller.abort(reason), 50);
    expect(await pending).toBe(reason);
  });

  it("describes a refused connection", async () => {
    const closed = createServer();
    closed.listen(0, "127.0.0.1");
    await once(closed, "listening");
    const port = (closed.address() as AddressInfo).port;
    closed.close();
    const refused = await failure(
      requestJson("GET", `http://127.0.0.1:${port}/v1/models`, undefined, options),
    );
    expect(refused).toBeInstanceOf(EngineError);
    expect((refused as EngineError).status).toBeNull();
    expect((refused as Error).message).toMatch(/^connection error \(.*ECONNREFUSED/);
  });

  it("reuses one keep-alive connection for requests in turn, one per request at once, until closed", async () => {
    const connections = new EngineConnections();
    const send = () => requestJson("POST", `${base}/v1/chat/completions`, {}, { ...options, connections });
    for (let i = 0; i < 5; i++) expect(await send()).toMatchObject({ usage: { prompt_tokens: 5 } });
    expect(connections.size).toBe(1);
    await Promise.all(Array.from({ length: 8 }, send));
    expect(connections.size).toBe(8);
    await connections.close();
    const closed = await failure(send());
    expect(closed).toBeInstanceOf(EngineError);
    expect((closed as Error).message).toBe("connection error (the engine connections are closed)");
  });
});

describe("a long-lived signal", () => {
  it("carries 10,000 chat requests and keeps one abort listener, then still cancels", async () => {
    const policy = new ChatPolicy({ baseURL: `${base}/v1`, model: "m", dialect: "vllm", concurrency: 64 });
    const rollout = new AbortController();
    const signal = rollout.signal;
    const before = served;
    let most = 0;
    const request = { ...singleRequest("go"), signal };
    // Sampled between I/O events, while requests are at the engine (64 at once) and others wait.
    const sampler = setInterval(() => {
      most = Math.max(most, getEventListeners(signal, "abort").length);
    }, 1);
    for (let wave = 0; wave < 20; wave++) {
      const answers = Array.from({ length: 500 }, () => policy.generate(request));
      for (const response of await Promise.all(answers)) expect(response.text).toContain("<answer>Up");
    }
    clearInterval(sampler);
    expect(served - before).toBe(10_000);
    expect(most).toBeLessThanOrEqual(2);
    expect(getEventListeners(signal, "abort").length).toBeLessThanOrEqual(1);

    const hanging = new ChatPolicy({ baseURL: `${base}/hang`, model: "m", dialect: "vllm" });
    const pending = failure(hanging.generate(request));
    setTimeout(() => rollout.abort(new Error("cancelled by the client")), 50);
    expect(await pending).toEqual(new PolicyError("cancelled"));
    await policy.close();
    await hanging.close();
  }, 120_000);

  it("deadlines share one parent listener and let go of it in O(1)", () => {
    const parent = new AbortController();
    const limits = Array.from({ length: 1_000 }, () => deadline(60_000, parent.signal));
    expect(getEventListeners(parent.signal, "abort")).toHaveLength(1);
    for (const limit of limits.slice(0, 500)) limit.dispose();
    parent.abort(new Error("stop"));
    expect(limits.slice(0, 500).every((l) => !l.signal.aborted)).toBe(true);
    expect(limits.slice(500).every((l) => l.signal.aborted && !l.expired)).toBe(true);
    expect((limits[999].signal.reason as Error).message).toBe("stop");
    for (const limit of limits.slice(500)) limit.dispose();
  });
});
