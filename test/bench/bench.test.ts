// `rollgym bench` end to end at a tiny size: real mock engine and server children, the real
// WebSocket protocol, the load generator; the JSON must be complete and sane, every episode
// must finish. Nothing here asserts on wall time.
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type Child, startRollgym } from "../../src/bench/children.ts";
import { markdownTable, textTable } from "../../src/bench/report.ts";
import type { CaseResult } from "../../src/bench/run.ts";
import { runInProcess } from "../cli/in-process.ts";
import { expectUsageError, rollgym } from "../helpers/cli.ts";

const TINY = [
  "--episodes",
  "64",
  "--latency-model",
  "none",
  "--duration",
  "2",
  "--max-turn",
  "2",
  "--max-tokens",
  "8",
];

function expectSane(r: CaseResult, fromMocks: boolean): void {
  for (const key of [
    "episodes_per_s",
    "turns_per_s",
    "requests_per_s",
    "tokens_per_s",
    "window_s",
    "server_cpu_ms_per_request",
    "server_cpu_cores",
    "server_rss_peak_bytes",
    "server_rss_bytes",
    "saturation_ratio",
  ] as const) {
    expect(r[key], key).toBeGreaterThan(0);
  }
  expect(r.event_loop_lag_p99_ms).toBeGreaterThanOrEqual(0);
  expect(r.event_loop_lag_max_ms).toBeGreaterThanOrEqual(r.event_loop_lag_p99_ms ?? 0);
  expect(r.group_latency_ms.groups).toBeGreaterThan(0);
  expect(r.group_latency_ms.p50).toBeGreaterThan(0);
  expect(r.group_latency_ms.max).toBeGreaterThanOrEqual(r.group_latency_ms.p99);
  expect(r.group_latency_ms.p99).toBeGreaterThanOrEqual(r.group_latency_ms.p50);
  // Every turn is one inference request. The server counts a turn when it applies the answer,
  // the engine when it sends it, and a tiny window cuts waves of turns: the same order, not equal.
  expect(r.requests_per_s).toBeGreaterThan(r.turns_per_s / 2);
  expect(r.requests_per_s).toBeLessThan(r.turns_per_s * 2);
  expect(r.server_rss_peak_bytes).toBeGreaterThanOrEqual(r.server_rss_bytes ?? 0);
  expect(r.load_generator?.tokens_per_s).toBeGreaterThan(0);
  expect(r.load_generator?.failures).toBe(0);
  expect(r.episodes_in_flight).toBe(64);
  expect(r.group_concurrency).toBe(4);
  expect(r.episodes_total).toBeGreaterThan(64);
  expect(r.episodes_total % 16).toBe(0);
  expect(r.episodes_finished).toBe(r.episodes_total);
  expect(r.episodes_failed).toBe(0);
  expect(r.latency_model_description).not.toBe("");
  expect(r).toHaveProperty("engine_running_mean");
  expect(r.load_generator).toHaveProperty("engine_running_mean");
  if (fromMocks) expect(r.engine_cpu_cores).toBeGreaterThan(0);
  else expect(r.engine_cpu_cores).toBeNull();
  expect(r.server_cpu_ms_per_turn).toBeGreaterThan(0);
  for (const at of [r.metrics_answer_ms.start, r.metrics_answer_ms.end]) {
    expect(at.engines).toBeGreaterThan(0);
    expect(at.server).toBeGreaterThan(0);
  }
  if (r.mode === "chat") expectFloor(r);
  if (fromMocks) {
    // The mock engines count every request by route: a chat turn is one chat completion, plus a
    // /tokenize count now and then.
    expect(r.engine_requests_by_route["/v1/chat/completions"]).toBeGreaterThan(0);
    expect(r.engine_requests_per_turn).toBeGreaterThan(0.5);
    expect(r.engine_requests_by_route).not.toHaveProperty("/metrics");
    expect(r.server_rss_bound_bytes).toBeGreaterThan(450 * 2 ** 20);
    expect(r.server_rss_bound_derivation).toContain("docs/server.md");
    expect(r.server_rss_bound_derivation).toContain(
      `${r.episodes_in_flight * r.replicas} engine requests in flight × 20 KiB`,
    );
  }
}

/** The floor clients ran with no failure, and the multiples are server ÷ floor. */
function expectFloor(r: CaseResult): void {
  for (const client of ["raw", "undici"] as const) {
    const floor = r.floor?.[client];
    expect(floor?.client).toBe(client);
    expect(floor?.failures, floor?.first_error ?? "").toBe(0);
    expect(floor?.requests).toBeGreaterThan(0);
    expect(floor?.cpu_ms_per_request).toBeGreaterThan(0);
    expect(r.server_over_floor?.[client]).toBeCloseTo(
      (r.server_cpu_ms_per_request ?? 0) / (floor?.cpu_ms_per_request ?? 1),
      1,
    );
  }
}

describe("rollgym bench", () => {
  const children: Child[] = [];
  afterAll(async () => {
    for (const c of children.reverse()) await c.stop();
  });

  it("measures a small case end to end: JSON with every figure, SVG charts, every episode finished", async () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-bench-"));
    const result = await rollgym(["bench", ...TINY, "--json", "--svg", dir]);
    expect(result.code, result.stderr).toBe(0);
    const { results } = JSON.parse(result.stdout) as { results: CaseResult[] };
    expect(results).toHaveLength(1);
    const [r] = results;
    expect(r.latency_model).toBe("none");
    expect(r.replicas).toBe(1);
    expectSane(r, true);
    // Not a terminal: progress comes as plain lines, and the result line says what finished.
    expect(result.stderr).not.toContain("\r");
    expect(result.stderr).toContain(`${r.episodes_total}/${r.episodes_total} finished`);
    const charts = readdirSync(dir).filter((f) => f.endsWith(".svg"));
    expect(charts).toContain("server-cpu-per-request.svg");
    for (const chart of charts)
      expect(readFileSync(join(dir, chart), "utf8")).toMatch(/^<svg [\s\S]*<\/svg>\n$/);
    // The terminal table fits 120 columns and keeps every column.
    const text = textTable(results);
    expect(
      Math.max(
        ...text
          .split("\n")
          .filter((l) => !l.startsWith("Latency model"))
          .map((l) => l.length),
      ),
    ).toBeLessThanOrEqual(120);
    for (const title of ["episodes/s", "p50/p99/max s", "RSS peak", "rollgym/generator"])
      expect(text.replace(/\s+/g, " ")).toContain(title);
    const table = markdownTable(results);
    expect(table).toContain("| 64 | 1 | none |");
    expect(table).toContain("Latency model none:");
  });

  it("runs a case in chat and token mode side by side: engine requests per turn by route, the ratio of CPU per turn", async () => {
    const result = await rollgym(["bench", ...TINY, "--mode", "chat,tokens", "--no-saturation", "--json"]);
    expect(result.code, result.stderr).toBe(0);
    const { results } = JSON.parse(result.stdout) as { results: CaseResult[] };
    expect(results.map((r) => r.mode)).toEqual(["chat", "tokens"]);
    const [chat, tokens] = results;
    expect(chat.load_generator).toBeNull();
    // The floor needs the prompt mix even without the load generator; token mode has no floor.
    expectFloor(chat);
    expect(tokens.floor).toBeNull();
    expect(tokens.server_over_floor).toBeNull();
    for (const r of results) {
      expect(r.episodes_failed).toBe(0);
      expect(r.server_cpu_ms_per_turn).toBeGreaterThan(0);
    }
    // Token mode plays through /v1/completions and renders through /tokenize and /detokenize,
    // all of them counted; chat mode sends no completion requests and never decodes.
    expect(tokens.engine_requests_by_route["/v1/completions"]).toBeGreaterThan(0);
    expect(tokens.engine_requests_by_route["/tokenize"]).toBeGreaterThan(0);
    expect(tokens.engine_requests_by_route["/detokenize"]).toBeGreaterThan(0);
    expect(tokens.engine_requests_by_route).not.toHaveProperty("/v1/chat/completions");
    expect(chat.engine_requests_by_route).not.toHaveProperty("/v1/completions");
    expect(chat.engine_requests_by_route).not.toHaveProperty("/detokenize");
    expect(tokens.engine_requests_per_turn).toBeGreaterThan(chat.engine_requests_per_turn ?? Infinity);
    expect(chat.tokens_over_chat).toBeNull();
    expect(tokens.tokens_over_chat?.server_cpu_per_turn).toBeCloseTo(
      (tokens.server_cpu_ms_per_turn ?? 0) / (chat.server_cpu_ms_per_turn ?? 1),
      2,
    );
    expect(tokens.tokens_over_chat?.engine_requests_per_turn).toBeCloseTo(
      (tokens.engine_requests_per_turn ?? 0) / (chat.engine_requests_per_turn ?? 1),
      2,
    );
    expect(textTable(results).split("\n")).toContain("Cost");
    const table = markdownTable(results);
    for (const title of [
      "engine req/turn",
      "tokens/chat CPU/turn",
      "server ÷ raw",
      "server ÷ undici",
      "RSS bound MiB",
    ])
      expect(table).toContain(`| ${title} |`);
    expect(table).toContain("| tokens | 64 | 1 | none |");
  });

  it("attaches to a running server with --server and --llm", async () => {
    const engine = await startRollgym(
      "mock engine",
      ["mock-engine", "--port", "0", "--model", "bench-test"],
      /mock engine listening on (\S+)/,
    );
    children.push(engine);
    const server = await startRollgym(
      "rollgym serve",
      ["serve", "--port", "0", "--llm", engine.url, "--model", "bench-test", "--group-concurrency", "4"],
      /rollgym serving on (\S+)/,
    );
    children.push(server);
    const result = await rollgym([
      "bench",
      "--server",
      server.url,
      "--server-pid",
      String(server.pid),
      "--llm",
      engine.url,
      "--model",
      "bench-test",
      "--episodes",
      "64",
      "--duration",
      "1",
      "--json",
    ]);
    expect(result.code, result.stderr).toBe(0);
    const [r] = (JSON.parse(result.stdout) as { results: CaseResult[] }).results;
    expect(r.latency_model).toBe("real");
    expectSane(r, false);
  });

  it("refuses a server it cannot reach with one clear line (exit 1)", async () => {
    const result = await runInProcess([
      "bench",
      "--server",
      "http://127.0.0.1:1",
      "--llm",
      "http://127.0.0.1:1/v1",
      "--model",
      "m",
      "--episodes",
      "64",
    ]);
    expectUsageError(result, ["bench:", "127.0.0.1:1"], 1);
  });

  it.each([
    [
      ["--episodes", "65"],
      ["--episodes", "65", "multiple of group size × clients (16 × 1 = 16)"],
    ],
    [
      ["--episodes", "64", "--clients", "3"],
      ["--episodes", "16 × 3"],
    ],
    [
      ["--replicas", "3"],
      ["--replicas", "1, 2, 4"],
    ],
    [
      ["--latency-model", "fast"],
      ["--latency-model", "fast", "none, default, slow10x"],
    ],
    [["--server", "http://127.0.0.1:8787"], ["--server needs --llm"]],
    [["--llm", "http://gpu:8000/v1"], ["--llm needs --model"]],
    [
      ["--llm", "gpu:8000"],
      ["--llm", "not an http(s) URL"],
    ],
    [
      ["--llm", "http://gpu:8000/v1", "--model", "m", "--replicas", "2"],
      ["--replicas", "--llm"],
    ],
    [
      [
        "--server",
        "http://127.0.0.1:8787",
        "--llm",
        "http://gpu:8000/v1",
        "--model",
        "m",
        "--episodes",
        "64,128",
      ],
      ["--server", "--episodes takes one value"],
    ],
    [["--server-pid", "12"], ["--server-pid applies to --server only"]],
    [
      ["--duration", "0"],
      ["--duration", "from 1"],
    ],
    [["--json", "--markdown"], ["--json and --markdown"]],
    [
      ["--mode", "chat,bits"],
      ["--mode", "bits", "chat, tokens"],
    ],
    [
      [
        "--serve-from",
        "/tmp/a",
        "--server",
        "http://127.0.0.1:8787",
        "--llm",
        "http://gpu:8000/v1",
        "--model",
        "m",
        "--episodes",
        "64",
      ],
      ["--serve-from", "--server"],
    ],
    [["--frobnicate"], ["unknown option --frobnicate"]],
  ])("bad flags %j: one line naming the flag, exit 2", async (args, mentions) => {
    expectUsageError(await runInProcess(["bench", ...args]), mentions);
  });
});
