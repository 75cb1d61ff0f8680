// Streaming into Python (issue #11, item 3): how fast the Python client receives and decodes
// group frames, measured on a named payload mix replayed over loopback.
//
// 1. Record. The mock vLLM engine (`rollgym mock-engine`, real Qwen3 tokenizer) and `rollgym
//    serve --llm` in processes of their own; a protocol client asks for one stream rollout of
//    --groups × --group-size CoordSokoban episodes, max_turn --max-turn, in token mode and then
//    in chat mode, and keeps every frame's bytes exactly as the server sent them.
// 2. Replay. A small WebSocket server (ws) speaks the protocol to the Python client: welcome as
//    recorded, then for every `rollout` request the recorded group frames in order, each
//    spending one credit as the real server's outbox does, then the recorded `batch` verdict.
//    Only the rollout id changes, patched in place (same length), so each request is a new
//    rollout to the client.
// 3. Measure. bench/python_stream.py drives the real client (`Client.stream`, its own
//    WebSocket reader, decode into Group objects with the token logs' numpy views and checks,
//    acknowledgements and credit) until --mb of frame bytes have arrived, --runs times per
//    mode. Also bench/tokens_decode.py on the same frames, without any socket (the ceiling).
//
// Usage: node bench/python-stream.ts [--mb 500] [--runs 3] [--groups 8] [--group-size 16]
//          [--max-turn 5] [--tag CoordSokoban] [--tokenizer qwen3] [--api sync,async]
//          [--modes tokens,chat] [--save DIR] [--frames DIR] [--client DIR] [--json FILE]
//   --save DIR   also write the recorded frames (one file per mode) to DIR
//   --frames DIR replay frames saved earlier instead of recording
//   --client DIR the directory holding the rollgym_client package to measure (default
//                python/), e.g. an older version for a before/after comparison
//   --listen     only replay: print the replay server's URL and serve until stopped (for
//                profiling the client by hand, e.g. python3 -m cProfile bench/python_stream.py …)
//   --engine-args="…"  `rollgym mock-engine` flags for the recording (default
//                "--response-tokens lognormal:120:400": about 1,500 token ids per episode)
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { WebSocketServer } from "ws";
import { decodeFrame, encodeMessage } from "../protocol/codec.ts";
import { NodeClient } from "../src/client/node.ts";
import type { Frame } from "../src/client/protocol-client.ts";

const ROOT = join(import.meta.dirname, "..");
const PYTHON = "/usr/bin/python3"; // Debian's: has msgpack, websockets, numpy
/** The rollout id of the recording: replays patch it in place, so every id has its length. */
const RECORDED_ID = "replay-00000000";
type Mode = "tokens" | "chat";

const { values } = parseArgs({
  options: {
    mb: { type: "string", default: "500" },
    runs: { type: "string", default: "3" },
    groups: { type: "string", default: "8" },
    "group-size": { type: "string", default: "16" },
    "max-turn": { type: "string", default: "5" },
    tag: { type: "string", default: "CoordSokoban" },
    tokenizer: { type: "string", default: "qwen3" },
    api: { type: "string", default: "sync,async" },
    modes: { type: "string", default: "tokens,chat" },
    save: { type: "string" },
    frames: { type: "string" },
    json: { type: "string" },
    listen: { type: "boolean", default: false },
    client: { type: "string" },
    // The mock's own answers are 10–30 tokens; lognormal lengths (median 120, p99 400) make an
    // episode of 5 turns about 1,500 token ids, the payload mix.
    "engine-args": { type: "string", default: "--response-tokens lognormal:120:400" },
  },
});

function int(name: keyof typeof values): number {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v < 1)
    throw new RangeError(`--${name}: ${values[name]} is not an integer ≥ 1`);
  return v;
}

const modes = values.modes!.split(",") as Mode[];
for (const m of modes)
  if (m !== "tokens" && m !== "chat") throw new RangeError(`--modes: tokens and/or chat, got ${m}`);
const apis = values.api!.split(",");
for (const a of apis)
  if (a !== "sync" && a !== "async") throw new RangeError(`--api: sync and/or async, got ${a}`);

/** One mode's recording: the welcome, the group frames in arrival order, the verdict. */
interface Recording {
  welcome: Buffer;
  groups: Buffer[];
  batch: Buffer;
}

// ---------------------------------------------------------------------------------------------
// 1. Record from the real server
// ---------------------------------------------------------------------------------------------

/** `node bin/rollgym.js ARGS` until it prints a line matching `ready`; resolves its first group. */
async function start(args: string[], ready: RegExp): Promise<{ child: ChildProcess; match: string }> {
  const child = spawn(process.execPath, [join(ROOT, "bin", "rollgym.js"), ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "inherit"],
  });
  for await (const line of createInterface({ input: child.stdout! })) {
    const match = ready.exec(line);
    if (match) {
      child.stdout!.resume(); // keep draining whatever else it prints
      return { child, match: match[1] };
    }
  }
  throw new Error(`rollgym ${args[0]} exited before it was ready`);
}

async function record(): Promise<Record<Mode, Recording>> {
  const engine = await start(
    [
      "mock-engine",
      "--port",
      "0",
      "--model",
      "mock",
      "--tokenizer",
      values.tokenizer!,
      ...values["engine-args"]!.split(" ").filter((a) => a !== ""),
    ],
    /listening on (\S+)/,
  );
  let server: ChildProcess | null = null;
  try {
    const serve = await start(
      ["serve", "--port", "0", "--llm", engine.match, "--model", "mock"],
      /serving on (http:\/\/\S+)/,
    );
    server = serve.child;
    const out = {} as Record<Mode, Recording>;
    for (const mode of ["tokens", "chat"] as const) {
      const { client } = await NodeClient.connect(serve.match, null, { record: true });
      client.send({ type: "hello", protocol: 1, client: "bench-python-stream" });
      await client.next((f) => f.type === "welcome");
      client.send({ type: "credit", groups: 1_000_000 });
      client.send({
        type: "rollout",
        id: RECORDED_ID,
        tags: [{ tag: values.tag!, groups: int("groups") }],
        mode: "train",
        group_size: int("group-size"),
        max_turn: int("max-turn"),
        delivery: "stream",
        ...(mode === "tokens" ? { tokens: true } : {}),
      });
      const verdict = await client.next((f) => f.type === "batch" || f.type === "error", 600_000);
      if (verdict.type === "error")
        throw new Error(`the server refused the ${mode} rollout: ${verdict.message}`);
      client.send({ type: "ack", rollout: RECORDED_ID, groups: [], batch: true });
      const pick = (type: string) => client.raw.filter((_, i) => client.received[i].type === type);
      out[mode] = { welcome: pick("welcome")[0], groups: pick("group"), batch: pick("batch")[0] };
      client.close();
      await client.closed();
    }
    return out;
  } finally {
    server?.kill("SIGTERM");
    engine.child.kill("SIGTERM");
  }
}

// Frames on disk: [u32 little-endian length][msgpack bytes]… — the layout tokens_decode.py reads
// (group frames only); the welcome and verdict go in files of their own.
function save(dir: string, mode: Mode, r: Recording): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${mode}.frames`), lengthPrefixed(r.groups));
  writeFileSync(join(dir, `${mode}.welcome`), r.welcome);
  writeFileSync(join(dir, `${mode}.batch`), r.batch);
}

function load(dir: string, mode: Mode): Recording {
  const data = readFileSync(join(dir, `${mode}.frames`));
  const groups: Buffer[] = [];
  for (let at = 0; at < data.length; ) {
    const n = data.readUInt32LE(at);
    groups.push(data.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
  return {
    groups,
    welcome: readFileSync(join(dir, `${mode}.welcome`)),
    batch: readFileSync(join(dir, `${mode}.batch`)),
  };
}

function lengthPrefixed(frames: Buffer[]): Buffer {
  return Buffer.concat(
    frames.flatMap((f) => {
      const header = Buffer.alloc(4);
      header.writeUInt32LE(f.byteLength);
      return [header, f];
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// 2. Replay
// ---------------------------------------------------------------------------------------------

/** The byte offset of the recorded rollout id's text in a frame (msgpack str: header, then UTF-8). */
function idOffset(frame: Buffer): number {
  const at = frame.indexOf(RECORDED_ID, 0, "utf8");
  if (at < 0) throw new Error("a recorded frame does not name the recorded rollout id");
  return at;
}

interface Replayer {
  url: string;
  close(): Promise<void>;
}

/** A protocol server that answers every rollout request with the recording of its mode. */
async function replay(recordings: Partial<Record<Mode, Recording>>): Promise<Replayer> {
  const prepared = Object.fromEntries(
    Object.entries(recordings).map(([mode, r]) => [
      mode,
      {
        groups: r.groups.map((f) => ({ bytes: f, at: idOffset(f) })),
        batch: { bytes: r.batch, at: idOffset(r.batch) },
      },
    ]),
  ) as Partial<
    Record<Mode, { groups: { bytes: Buffer; at: number }[]; batch: { bytes: Buffer; at: number } }>
  >;
  const welcome = Object.values(recordings)[0]!.welcome;
  const wss = new WebSocketServer({
    host: "127.0.0.1",
    port: 0,
    path: "/v1/rollouts",
    perMessageDeflate: false,
  });
  await new Promise<void>((resolve) => wss.once("listening", resolve));
  wss.on("connection", (ws) => {
    let credit = 0;
    // The outbox as the real server keeps it: group frames wait for credit, the verdict waits
    // behind its groups.
    const outbox: { frame: Buffer; group: boolean }[] = [];
    const pump = () => {
      while (outbox.length > 0 && (!outbox[0].group || credit > 0)) {
        const next = outbox.shift()!;
        if (next.group) credit--;
        ws.send(next.frame, { binary: true });
      }
    };
    const patched = (f: { bytes: Buffer; at: number }, id: string): Buffer => {
      const copy = Buffer.from(f.bytes); // the previous copy may still be queued in the socket
      copy.write(id, f.at, "utf8");
      return copy;
    };
    ws.on("message", (data: Buffer) => {
      const frame = decodeFrame(new Uint8Array(data)) as Frame;
      if (frame.type === "hello") ws.send(welcome, { binary: true });
      else if (frame.type === "credit") credit += Number(frame.groups);
      else if (frame.type === "rollout") {
        const id = String(frame.id);
        const r = prepared[frame.tokens === true ? "tokens" : "chat"];
        if (!r || Buffer.byteLength(id) !== RECORDED_ID.length) {
          const why = !r
            ? "no recording of this mode"
            : `rollout ids here are ${RECORDED_ID.length} bytes long`;
          ws.send(encodeMessage({ type: "error", code: "bad_frame", message: why, rollout: id }), {
            binary: true,
          });
          return;
        }
        for (const g of r.groups) outbox.push({ frame: patched(g, id), group: true });
        outbox.push({ frame: patched(r.batch, id), group: false });
      }
      // ack: nothing to let go of, the recording is kept anyway.
      pump();
    });
  });
  const { port } = wss.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => resolve());
      }),
  };
}

// ---------------------------------------------------------------------------------------------
// 3. Measure
// ---------------------------------------------------------------------------------------------

interface StreamRun {
  rollouts: number;
  frames: number;
  episodes: number;
  token_ids: number;
  bytes: number;
  seconds: number;
  cpu_seconds: number;
  mb_per_s: number;
  frames_per_s: number;
  episodes_per_s: number;
}

/** Runs PYTHON with ARGS without blocking this process's event loop (the replay server lives here). */
function python(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`${args[0]} exited with ${code}: ${stderr}`)),
    );
  });
}

async function pythonStream(url: string, mode: Mode, api: string, r: Recording): Promise<StreamRun> {
  const bytesPerRollout = r.groups.reduce((n, f) => n + f.byteLength, 0) + r.batch.byteLength;
  const args = [
    join(import.meta.dirname, "python_stream.py"),
    url,
    mode,
    String(int("mb")),
    String(bytesPerRollout),
    api,
    JSON.stringify({ tag: values.tag, groups: int("groups"), group_size: int("group-size") }),
    ...(values.client ? [values.client] : []),
  ];
  return JSON.parse(await python(args)) as StreamRun;
}

async function bareDecode(dir: string, mode: Mode): Promise<Record<string, number>> {
  const out = await python([join(import.meta.dirname, "tokens_decode.py"), join(dir, `${mode}.frames`), "2"]);
  return JSON.parse(out) as Record<string, number>;
}

/** The payload mix, read back from the frames themselves. */
function composition(r: Recording) {
  const frames = r.groups.map((f) => decodeFrame(new Uint8Array(f)) as Frame);
  const episodes = frames.flatMap((f) => f.episodes as { turns: unknown[] }[]);
  const tokenIds = frames.map((f) => (f.token_ids_i32 ? (f.token_ids_i32 as Uint8Array).byteLength / 4 : 0));
  const sizes = r.groups.map((f) => f.byteLength);
  const total = sizes.reduce((a, b) => a + b, 0);
  const turns = episodes.reduce((n, e) => n + e.turns.length, 0);
  return {
    group_frames: r.groups.length,
    episodes: episodes.length,
    turns,
    group_frame_bytes: total,
    bytes_per_frame: {
      min: Math.min(...sizes),
      mean: Math.round(total / sizes.length),
      max: Math.max(...sizes),
    },
    bytes_per_episode: Math.round(total / episodes.length),
    token_ids_per_episode: Math.round(tokenIds.reduce((a, b) => a + b, 0) / episodes.length),
    batch_frame_bytes: r.batch.byteLength,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const dir = values.frames ?? values.save ?? mkdtempSync(join(tmpdir(), "rollgym-python-stream-"));
  let recordings: Partial<Record<Mode, Recording>>;
  if (values.frames) {
    recordings = Object.fromEntries(modes.map((m) => [m, load(values.frames!, m)]));
  } else {
    process.stderr.write("recording: mock engine + rollgym serve, one rollout per mode …\n");
    const all = await record();
    for (const m of ["tokens", "chat"] as const) save(dir, m, all[m]);
    recordings = all;
  }
  const replayer = await replay(recordings);
  if (values.listen) {
    for (const m of modes) {
      const r = recordings[m]!;
      const bytes = r.groups.reduce((n, f) => n + f.byteLength, 0) + r.batch.byteLength;
      process.stdout.write(`${m}: ${bytes} bytes per rollout (frames in ${dir})\n`);
    }
    process.stdout.write(`replaying on ${replayer.url}\n`);
    return; // the server keeps the process alive
  }
  const result: Record<string, unknown> = {
    bench: "python-stream",
    date: new Date().toISOString(),
    machine: {
      node: process.version,
      cpus: cpus().length,
      cpu_model: cpus()[0]?.model,
      loadavg_1m: loadavg()[0],
    },
    apis,
    client: values.client ?? "python",
    target_mb: int("mb"),
    modes: {},
  };
  const lines: string[] = [];
  try {
    for (const mode of modes) {
      const r = recordings[mode]!;
      const mix = composition(r);
      const bare = await bareDecode(dir, mode);
      const byApi: Record<string, StreamRun[]> = {};
      lines.push(
        `${mode}: ${mix.group_frames} group frames × ${mix.bytes_per_frame.mean} B (${mix.bytes_per_frame.min}–${mix.bytes_per_frame.max}), ` +
          `${mix.episodes} episodes, ${mix.turns} turns, ${mix.bytes_per_episode} B and ${mix.token_ids_per_episode} token ids per episode, verdict ${mix.batch_frame_bytes} B`,
      );
      for (const api of apis) {
        const runs: StreamRun[] = [];
        byApi[api] = runs;
        for (let i = 0; i < int("runs"); i++) {
          const x = await pythonStream(replayer.url, mode, api, r);
          runs.push(x);
          process.stderr.write(
            `${mode} ${api} run ${i + 1}: ${x.mb_per_s.toFixed(0)} MB/s, ${x.frames_per_s.toFixed(0)} frames/s, ` +
              `${x.episodes_per_s.toFixed(0)} episodes/s (${(x.bytes / 1e6).toFixed(0)} MB in ${x.seconds.toFixed(2)} s, ` +
              `client CPU ${x.cpu_seconds.toFixed(2)} s), load ${loadavg()[0].toFixed(1)}\n`,
          );
        }
        const med = (k: keyof StreamRun) => median(runs.map((x) => x[k] as number));
        const perCpu = median(runs.map((x) => x.bytes / x.cpu_seconds / 1e6));
        lines.push(
          `  over WebSocket into Client.stream (${api}), median of ${runs.length}: ${med("mb_per_s").toFixed(0)} MB/s, ` +
            `${med("frames_per_s").toFixed(0)} frames/s, ${med("episodes_per_s").toFixed(0)} episodes/s ` +
            `(runs: ${runs.map((x) => x.mb_per_s.toFixed(0)).join(", ")} MB/s; ${perCpu.toFixed(0)} MB per client CPU-second)`,
        );
      }
      (result.modes as Record<string, unknown>)[mode] = { mix, runs: byApi, bare_decode: bare };
      lines.push(
        `  no socket (tokens_decode.py: decode + Group.from_frame): ${bare.mb_per_s.toFixed(0)} MB/s, ` +
          `${bare.mb_per_cpu_s.toFixed(0)} MB per CPU-second, ` +
          `msgpack alone ${bare.msgpack_only_mb_per_s.toFixed(0)} MB/s`,
      );
    }
  } finally {
    await replayer.close();
    if (!values.frames && !values.save) rmSync(dir, { recursive: true, force: true });
  }
  result.loadavg_1m_end = loadavg()[0];
  lines.push(
    `load average (1 min) ${(result.machine as { loadavg_1m: number }).loadavg_1m.toFixed(1)} at the start, ${loadavg()[0].toFixed(1)} at the end`,
  );
  process.stdout.write(`${lines.join("\n")}\n`);
  if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
}

await main();
