// Token mode, measured (issue #8).
//
// --engine llama: token logs against the real llama.cpp server with the real Qwen3 tokenizer
//   (scripts/llama/build.sh), RAGEN-format grammar, checked from the engine's side: every turn's
//   /completion answer is captured at the HTTP boundary and must show the log's ids as sampled,
//   the log's prefix as the prompt it evaluated, and a prefix-cache reuse covering the whole
//   previous sequence (one slot per episode: batches of exactly --slots episodes on -np slots).
//   /detokenize of the sampled ids must give the recorded text. Template and prompt drift are counted.
// --engine mock: the same batch in chat mode and in token mode against the mock vLLM engine
//   (zero latency, own process): wall time, engine HTTP requests, bytes per episode on the wire
//   (group frames as the server encodes them) and the Python client's decode speed.
//
// Usage:
//   node bench/tokens.ts --engine llama [--template chatml|qwen3] [--episodes 1000] [--slots 4]
//        [--slot-ctx 2048] [--max-turn 5] [--max-tokens 48] [--group-size 2] [--tag SimpleSokoban]
//        [--seed 0] [--decode-every 1] [--json FILE]
//   node bench/tokens.ts --engine mock [--groups 64] [--group-size 16] [--max-turn 5] [--concurrency 64]
//        [--tag CoordSokoban] [--tokenizer qwen3|toy] [--rounds 3] [--json FILE]
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface, type Interface } from "node:readline";
import { parseArgs } from "node:util";
import { createRegistry } from "../envs/catalog.ts";
import { encodeMessage } from "../protocol/codec.ts";
import { ragenGrammar, startLlamaServer } from "../scripts/llama/server.ts";
import { ChatPolicy } from "../src/llm/openai-chat.ts";
import type { BatchResult } from "../src/record/episode-record.ts";
import { type BatchRequest, runBatch } from "../src/rollout/batch.ts";
import { defaultBatchRequest } from "../src/rollout/request.ts";
import { groupFrame } from "../src/server/group-frame.ts";
import { CHECK_MEANINGS, EngineCapture, Evidence } from "./tokens-evidence.ts";

const { values } = parseArgs({
  options: {
    engine: { type: "string", default: "llama" },
    json: { type: "string" },
    tag: { type: "string" },
    "group-size": { type: "string" },
    "max-turn": { type: "string", default: "5" },
    "max-tokens": { type: "string" },
    seed: { type: "string", default: "0" },
    // llama
    template: { type: "string", default: "chatml" },
    episodes: { type: "string", default: "1000" },
    slots: { type: "string", default: "4" },
    "slot-ctx": { type: "string", default: "2048" },
    "decode-every": { type: "string", default: "1" },
    // mock
    groups: { type: "string", default: "64" },
    concurrency: { type: "string", default: "64" },
    tokenizer: { type: "string", default: "qwen3" },
    rounds: { type: "string", default: "3" },
  },
});

function int(name: keyof typeof values, min = 1): number {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v < min)
    throw new RangeError(`--${name}: ${values[name]} is not an integer ≥ ${min}`);
  return v;
}

const registry = createRegistry();
const machine = () => ({
  node: process.version,
  cpus: cpus().length,
  cpu_model: cpus()[0]?.model ?? "?",
  loadavg_1m: Number(loadavg()[0].toFixed(2)),
});

function batchRequest(
  tag: string,
  groups: number,
  groupSize: number,
  seed: number,
  maxTurn: number,
  maxTokens: number | null,
): BatchRequest {
  const base = defaultBatchRequest("train", { tags: [{ tag, groups }], groupSize, seed });
  return {
    ...base,
    episode: { ...base.episode, max_turn: maxTurn },
    sampling: maxTokens === null ? base.sampling : { ...base.sampling, max_tokens: maxTokens },
  };
}

const count = (m: Map<string | number, number>) =>
  Object.fromEntries([...m].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([k, v]) => [String(k), v]));

// ---------------------------------------------------------------------------------------------
// --engine llama
// ---------------------------------------------------------------------------------------------

async function llama(): Promise<void> {
  const template = values.template;
  if (template !== "chatml" && template !== "qwen3") throw new RangeError("--template: chatml or qwen3");
  const slots = int("slots");
  const groupSize = values["group-size"] === undefined ? 2 : int("group-size");
  if (slots % groupSize !== 0) throw new RangeError("--slots must be a multiple of --group-size");
  const target = int("episodes");
  const slotCtx = int("slot-ctx");
  const maxTurn = int("max-turn");
  const maxTokens = values["max-tokens"] === undefined ? 48 : int("max-tokens");
  const decodeEvery = int("decode-every");
  const seed0 = int("seed", 0);
  const tag = values.tag ?? "SimpleSokoban";
  const groups = slots / groupSize;

  const extraArgs = template === "chatml" ? ["--chat-template", "chatml"] : [];
  const server = await startLlamaServer({ ctx: slots * slotCtx, parallel: slots, threads: 1, extraArgs });
  const capture = new EngineCapture(server.baseUrl);
  const evidence = new Evidence();
  let batches = 0;
  let seconds = 0;
  try {
    const policy = new ChatPolicy({
      baseURL: `${server.baseUrl}/v1`,
      model: server.model,
      concurrency: slots,
      grammar: ragenGrammar("after-think"),
    });
    const info = await policy.preflight();
    const engine = policy.tokenEngine()!;
    const detokenize = async (ids: number[]): Promise<string> => {
      const res = await fetch(`${server.baseUrl}/detokenize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ tokens: ids }),
      });
      if (!res.ok) throw new Error(`/detokenize: HTTP ${res.status}`);
      return ((await res.json()) as { content: string }).content;
    };
    process.stderr.write(
      `llama.cpp, ${template} template, ${slots} slots × ${info.contextLength} ctx, ${tag}, ${groups} groups × ${groupSize} per batch, ` +
        `max_turn ${maxTurn}, max_tokens ${maxTokens}, ${target} episodes\n`,
    );
    const start = performance.now();
    let lastLine = 0;
    while (evidence.episodes < target) {
      // Exactly `slots` episodes in flight, all started together: each takes a slot of its own.
      const request = {
        ...batchRequest(tag, groups, groupSize, seed0 + batches * groups, maxTurn, maxTokens),
        tokens: true,
      };
      capture.clear();
      capture.counting = true;
      const batch = await runBatch(registry, request, policy);
      capture.counting = false;
      seconds = (performance.now() - start) / 1000;
      await evidence.add(batch.episodes, capture, detokenize, decodeEvery, "<think>");
      batches++;
      const now = performance.now();
      if (now - lastLine > 5_000 || evidence.episodes >= target) {
        lastLine = now;
        const rate = evidence.episodes / seconds;
        process.stderr.write(
          `${evidence.episodes}/${target} episodes, ${evidence.turns} turns, ${seconds.toFixed(0)} s, ` +
            `${rate.toFixed(2)} episodes/s, ETA ${((target - evidence.episodes) / rate).toFixed(0)} s, ` +
            `failed checks ${evidence.failedChecks}, failed episodes ${evidence.failedEpisodes}\n`,
        );
      }
    }
    seconds = (performance.now() - start) / 1000;
    // Drifting episodes' decoded logs around where they leave the template's rendering.
    const around = async (x: { ids: number[]; offset: number } | null): Promise<string | null> => {
      if (!x) return null;
      const text = await engine.decode(x.ids, "drift");
      return `…${text.slice(Math.max(0, x.offset - 60), x.offset)}⟨drift⟩${text.slice(x.offset, x.offset + 60)}…`;
    };
    const driftExample = await around(evidence.templateDriftExample);
    const driftExampleFinal = await around(evidence.templateDriftExampleFinal);
    await policy.close();
    const result = {
      bench: "tokens/llama",
      date: new Date().toISOString(),
      machine: machine(),
      server: server.command.join(" "),
      template,
      tag,
      slots,
      slot_ctx: info.contextLength,
      group_size: groupSize,
      max_turn: maxTurn,
      max_tokens: maxTokens,
      batches,
      seconds,
      episodes: evidence.episodes,
      failed_episodes: evidence.failedEpisodes,
      failures: evidence.failures,
      multi_turn_episodes: evidence.multiTurnEpisodes,
      turns: evidence.turns,
      sampled_ids: evidence.sampledIds,
      log_ids: evidence.logIds,
      max_log_length: evidence.maxLogLength,
      episodes_per_s: evidence.episodes / seconds,
      turns_per_s: evidence.turns / seconds,
      sampled_ids_per_s: evidence.sampledIds / seconds,
      engine_requests: count(capture.routes),
      engine_requests_per_turn: [...capture.routes.values()].reduce((a, b) => a + b, 0) / evidence.turns,
      turns_per_episode: count(evidence.turnsPerEpisode),
      end_reasons: count(evidence.endReasons),
      finish_reasons: count(evidence.finishReasons),
      stop_ids: count(evidence.endIds),
      checks: Object.fromEntries(
        Object.entries(evidence.checks).map(([k, c]) => [
          k,
          { ...c, meaning: CHECK_MEANINGS[k as keyof typeof CHECK_MEANINGS] },
        ]),
      ),
      failed_checks: evidence.failedChecks,
      cache_n_minus_previous_end_less_1: count(evidence.cacheExcess),
      first_turn_cache_share: evidence.firstTurnCached / evidence.firstTurnPrompt,
      slot_use: count(evidence.slotUse),
      detokenized_turns: evidence.detokenized,
      prompt_drift: evidence.promptDrift,
      prompt_echoes: engine.promptEchoes,
      template_drift_episodes: evidence.templateDriftEpisodes,
      template_unchecked_episodes: evidence.templateUnchecked,
      template_drift_multi_turn_episodes: evidence.templateDriftMultiTurn,
      template_drift_offsets: summary(evidence.templateDriftOffsets),
      template_drift_at_final_im_end: evidence.templateDriftAtFinalImEnd,
      template_drift_elsewhere: evidence.templateDriftEpisodes - evidence.templateDriftAtFinalImEnd,
      episodes_ending_with_im_end: evidence.endingWithImEnd,
      template_drift_example: driftExample,
      template_drift_example_final_im_end: driftExampleFinal,
    };
    report(result, llamaTable(result));
  } finally {
    capture.uninstall();
    await server.stop();
  }
}

function summary(xs: number[]): { n: number; min: number; median: number; max: number } | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return { n: s.length, min: s[0], median: s[Math.floor(s.length / 2)], max: s[s.length - 1] };
}

function llamaTable(
  r: Record<string, unknown> & { checks: Record<string, { checked: number; failed: number }> },
): string {
  const lines = [
    `${r.episodes} episodes (${r.multi_turn_episodes} multi-turn, ${r.failed_episodes} failed), ${r.turns} turns, ` +
      `${r.sampled_ids} sampled ids in ${(r.seconds as number).toFixed(0)} s ` +
      `(${(r.episodes_per_s as number).toFixed(2)} episodes/s, ${(r.sampled_ids_per_s as number).toFixed(0)} sampled ids/s)`,
    `turns per episode ${JSON.stringify(r.turns_per_episode)}; end ${JSON.stringify(r.end_reasons)}; finish ${JSON.stringify(r.finish_reasons)}`,
    `max log length ${r.max_log_length}; engine requests ${JSON.stringify(r.engine_requests)} (${(r.engine_requests_per_turn as number).toFixed(2)} per turn)`,
    "check                       checked   failed",
    ...Object.entries(r.checks).map(
      ([k, c]) => `${k.padEnd(26)} ${String(c.checked).padStart(8)} ${String(c.failed).padStart(8)}`,
    ),
    `cache_n − (previous turn_end − 1): ${JSON.stringify(r.cache_n_minus_previous_end_less_1)}; slots used ${JSON.stringify(r.slot_use)}`,
    `prompt drift ${r.prompt_drift} (engine echoes: ${r.prompt_echoes}); template drift in ${r.template_drift_episodes} episodes ` +
      `(${r.template_drift_multi_turn_episodes} multi-turn), offsets ${JSON.stringify(r.template_drift_offsets)}, ` +
      `unchecked ${r.template_unchecked_episodes}`,
    `  of which at the log's final sampled <|im_end|> ${r.template_drift_at_final_im_end} ` +
      `(episodes ending with <|im_end|>: ${r.episodes_ending_with_im_end}), elsewhere ${r.template_drift_elsewhere}`,
    `  example elsewhere: ${JSON.stringify(r.template_drift_example)}`,
    `  example at the final <|im_end|>: ${JSON.stringify(r.template_drift_example_final_im_end)}`,
    `stopped turns ended with ids ${JSON.stringify(r.stop_ids)}`,
  ];
  return lines.join("\n");
}

// ---------------------------------------------------------------------------------------------
// --engine mock
// ---------------------------------------------------------------------------------------------

interface MockProcess {
  url: string;
  stats(): Promise<{ requests: number; cpu_ms: number }>;
  stop(): void;
}

/** The mock engine in its own process (bench/tokens-mock-engine.ts), as a real engine would be. */
async function spawnMock(tokenizer: string): Promise<MockProcess> {
  const child: ChildProcess = spawn(
    process.execPath,
    [join(import.meta.dirname, "tokens-mock-engine.ts"), tokenizer],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  const lines: Interface = createInterface({ input: child.stdout! });
  const iterator = lines[Symbol.asyncIterator]();
  const next = async (): Promise<string> => {
    const { value, done } = await iterator.next();
    if (done) throw new Error("the mock engine exited");
    return value as string;
  };
  const first = await next();
  const match = /listening on (\S+)/.exec(first);
  if (!match) throw new Error(`the mock engine said ${JSON.stringify(first)}`);
  return {
    url: match[1],
    stats: async () => {
      child.stdin!.write("stats\n");
      return JSON.parse(await next()) as { requests: number; cpu_ms: number };
    },
    stop: () => child.stdin!.end(),
  };
}

interface ModeRow {
  mode: "chat" | "tokens";
  round: number;
  episodes: number;
  turns: number;
  failed: number;
  seconds: number;
  engine_requests: number;
  requests_per_s: number;
  turns_per_s: number;
  episodes_per_s: number;
  engine_requests_per_turn: number;
  /** CPU time of the rollout (this process) and of the mock engine's process, per turn. */
  client_cpu_ms_per_turn: number;
  engine_cpu_ms_per_turn: number;
  frames: number;
  frame_bytes: number;
  bytes_per_episode: number;
  /** Token mode: bytes of the token arrays alone, per episode (frame less the same frame without them). */
  token_array_bytes_per_episode: number | null;
  token_ids_per_episode: number | null;
  encode_mb_per_s: number;
  python_decode: {
    mb_per_s: number;
    msgpack_only_mb_per_s: number;
    episodes_per_s: number;
    frames_per_s: number;
  };
  /** As the client sent them (counted at its fetch). */
  engine_requests_by_route: Record<string, number>;
}

function frames(batch: BatchResult, withTokens = true): Uint8Array[] {
  return batch.groups.map((g) => {
    const episodes = g.env_ids.map((id) => batch.episodes[id]);
    const shown = withTokens ? episodes : episodes.map(({ tokens: _, ...rest }) => rest);
    return encodeMessage(groupFrame("bench", g.group_id, shown, g.kept, g.score));
  });
}

function pythonDecode(encoded: Uint8Array[], dir: string, name: string): ModeRow["python_decode"] {
  const file = join(dir, `${name}.frames`);
  const parts: Uint8Array[] = [];
  for (const f of encoded) {
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, f.byteLength, true);
    parts.push(header, f);
  }
  writeFileSync(file, Buffer.concat(parts));
  const run = spawnSync("/usr/bin/python3", [join(import.meta.dirname, "tokens_decode.py"), file, "2"], {
    encoding: "utf8",
  });
  if (run.status !== 0) throw new Error(`tokens_decode.py failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as ModeRow["python_decode"];
}

async function mock(): Promise<void> {
  const groups = int("groups");
  const groupSize = values["group-size"] === undefined ? 16 : int("group-size");
  const maxTurn = int("max-turn");
  const maxTokens = values["max-tokens"] === undefined ? null : int("max-tokens");
  const concurrency = int("concurrency");
  const rounds = int("rounds");
  const tag = values.tag ?? "CoordSokoban";
  const seed = int("seed", 0);
  const tokenizer = values.tokenizer!;
  const engine = await spawnMock(tokenizer);
  const routes = new EngineCapture(engine.url.replace(/\/v1$/, ""));
  const dir = mkdtempSync(join(tmpdir(), "rollgym-bench-tokens-"));
  const rows: ModeRow[] = [];
  try {
    const policy = new ChatPolicy({ baseURL: engine.url, model: "mock", concurrency });
    await policy.preflight();
    // Warm-up: both paths once on a small batch (JIT, connections, the mock's tokenizer caches).
    const small = batchRequest(tag, Math.min(8, groups), groupSize, seed + 1_000_000, maxTurn, maxTokens);
    await runBatch(registry, small, policy);
    await runBatch(registry, { ...small, tokens: true }, policy);
    for (let round = 1; round <= rounds; round++) {
      // Each round a fresh batch (chat mode caches token counts by prompt), played in both modes,
      // first chat then tokens in odd rounds, the other way round in even ones.
      const request = batchRequest(tag, groups, groupSize, seed + round * 100_000, maxTurn, maxTokens);
      const order = round % 2 === 1 ? (["chat", "tokens"] as const) : (["tokens", "chat"] as const);
      for (const mode of order) {
        const before = await engine.stats();
        routes.routes.clear();
        const cpu = process.cpuUsage();
        const start = performance.now();
        const batch = await runBatch(registry, { ...request, tokens: mode === "tokens" }, policy);
        const seconds = (performance.now() - start) / 1000;
        const clientCpu = process.cpuUsage(cpu);
        const after = await engine.stats();
        const requests = after.requests - before.requests;
        const byRoute = count(routes.routes);
        const turns = batch.episodes.reduce((n, e) => n + e.turns.length, 0);
        const encodeStart = performance.now();
        const encoded = frames(batch);
        const encodeSeconds = (performance.now() - encodeStart) / 1000;
        const bytes = encoded.reduce((n, f) => n + f.byteLength, 0);
        const episodes = batch.episodes.length;
        let tokenArrays: number | null = null;
        let tokenIds: number | null = null;
        if (mode === "tokens") {
          const without = frames(batch, false).reduce((n, f) => n + f.byteLength, 0);
          tokenArrays = (bytes - without) / episodes;
          tokenIds = batch.episodes.reduce((n, e) => n + (e.tokens?.ids.length ?? 0), 0) / episodes;
        }
        const decode = pythonDecode(encoded, dir, `${mode}-${round}`);
        const row: ModeRow = {
          mode,
          round,
          episodes,
          turns,
          failed: batch.failed,
          seconds,
          engine_requests: requests,
          requests_per_s: requests / seconds,
          turns_per_s: turns / seconds,
          episodes_per_s: episodes / seconds,
          engine_requests_per_turn: requests / turns,
          client_cpu_ms_per_turn: (clientCpu.user + clientCpu.system) / 1000 / turns,
          engine_cpu_ms_per_turn: (after.cpu_ms - before.cpu_ms) / turns,
          frames: encoded.length,
          frame_bytes: bytes,
          bytes_per_episode: bytes / episodes,
          token_array_bytes_per_episode: tokenArrays,
          token_ids_per_episode: tokenIds,
          encode_mb_per_s: bytes / encodeSeconds / 1e6,
          python_decode: decode,
          engine_requests_by_route: byRoute,
        };
        rows.push(row);
        process.stderr.write(
          `round ${round} ${mode}: ${episodes} episodes, ${turns} turns in ${seconds.toFixed(2)} s, ` +
            `${requests} engine requests\n`,
        );
      }
    }
    await policy.close();
  } finally {
    routes.uninstall();
    engine.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const result = {
    bench: "tokens/mock",
    date: new Date().toISOString(),
    machine: machine(),
    tag,
    groups,
    group_size: groupSize,
    max_turn: maxTurn,
    max_tokens: maxTokens,
    concurrency,
    tokenizer,
    rows,
    ratios: rows
      .filter((r) => r.mode === "tokens")
      .map((t) => {
        const c = rows.find((r) => r.mode === "chat" && r.round === t.round)!;
        return {
          round: t.round,
          seconds: t.seconds / c.seconds,
          turns_per_s: t.turns_per_s / c.turns_per_s,
          requests_per_s: t.requests_per_s / c.requests_per_s,
          engine_requests_per_turn: t.engine_requests_per_turn / c.engine_requests_per_turn,
          client_cpu_per_turn: t.client_cpu_ms_per_turn / c.client_cpu_ms_per_turn,
          engine_cpu_per_turn: t.engine_cpu_ms_per_turn / c.engine_cpu_ms_per_turn,
          bytes_per_episode: t.bytes_per_episode / c.bytes_per_episode,
          python_decode_mb_per_s: t.python_decode.mb_per_s / c.python_decode.mb_per_s,
          python_decode_episodes_per_s: t.python_decode.episodes_per_s / c.python_decode.episodes_per_s,
        };
      }),
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const medianRatios = Object.fromEntries(
    Object.keys(result.ratios[0])
      .filter((k) => k !== "round")
      .map((k) => [k, median(result.ratios.map((q) => q[k as keyof (typeof result.ratios)[number]]))]),
  );
  Object.assign(result, { median_ratios: medianRatios });
  const table = [
    `${tag} train batch, ${groups} groups × ${groupSize}, max_turn ${maxTurn}, concurrency ${concurrency}, mock tokenizer ${tokenizer}`,
    "mode   round  turns  seconds  turns/s  req/s  req/turn  bytes/episode  py decode MB/s  py episodes/s",
    ...rows.map(
      (r) =>
        `${r.mode.padEnd(6)} ${String(r.round).padStart(5)} ${String(r.turns).padStart(6)} ${r.seconds.toFixed(2).padStart(8)} ` +
        `${r.turns_per_s.toFixed(0).padStart(8)} ${r.requests_per_s.toFixed(0).padStart(6)} ${r.engine_requests_per_turn.toFixed(2).padStart(9)} ` +
        `${r.bytes_per_episode.toFixed(0).padStart(14)} ${r.python_decode.mb_per_s.toFixed(0).padStart(15)} ` +
        `${r.python_decode.episodes_per_s.toFixed(0).padStart(14)}`,
    ),
    ...result.ratios.map(
      (q) =>
        `round ${q.round} tokens/chat: time ${q.seconds.toFixed(2)}×, turns/s ${q.turns_per_s.toFixed(2)}×, ` +
        `requests/turn ${q.engine_requests_per_turn.toFixed(2)}×, bytes/episode ${q.bytes_per_episode.toFixed(2)}×, ` +
        `decode MB/s ${q.python_decode_mb_per_s.toFixed(2)}×, decode episodes/s ${q.python_decode_episodes_per_s.toFixed(2)}×`,
    ),
    `median tokens/chat: ${JSON.stringify(medianRatios, (_, v) => (typeof v === "number" ? Number(v.toFixed(2)) : v))}`,
    ...rows.map(
      (r) =>
        `${r.mode} round ${r.round}: requests ${JSON.stringify(r.engine_requests_by_route)}` +
        (r.token_ids_per_episode === null
          ? ""
          : `; ${r.token_ids_per_episode.toFixed(0)} token ids and ${r.token_array_bytes_per_episode!.toFixed(0)} bytes of token arrays per episode`) +
        `; CPU per turn: client ${r.client_cpu_ms_per_turn.toFixed(2)} ms, engine ${r.engine_cpu_ms_per_turn.toFixed(2)} ms` +
        `; encode ${r.encode_mb_per_s.toFixed(0)} MB/s; python msgpack alone ${r.python_decode.msgpack_only_mb_per_s.toFixed(0)} MB/s`,
    ),
  ];
  report(result, table.join("\n"));
}

function report(result: object, table: string): void {
  process.stdout.write(`${table}\n`);
  if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
}

if (values.engine === "llama") await llama();
else if (values.engine === "mock") await mock();
else throw new RangeError(`--engine: llama or mock, got ${values.engine}`);
