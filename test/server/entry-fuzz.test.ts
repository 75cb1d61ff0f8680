// Issue #28.1: every entry point of a default `rollgym serve`, run as users run it (its own
// process), fed deep, wide, huge and malformed values in every field: the main socket's msgpack
// frames, OpenEnv's JSON frames and HTTP bodies, episode-file uploads, and the answers of a
// hostile remote OpenEnv env. After each case the process is alive and a bystander is served
// (a rollout over the main socket, and /healthz). Values are built as raw bytes, so the test's
// own encoder never walks them.
import { type ChildProcess, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encode } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket, { type WebSocketServer } from "ws";

import { ROOT, spawnServe } from "../helpers/cli.ts";
import { fakeOpenEnvServer, remoteTagConfigFile, startPythonProvider } from "../helpers/openenv-remote.ts";
import { type Frame, playToVerdict, rolloutFrame, TestClient } from "../helpers/ws-client.ts";

const DEEP = 100_000;

/** JSON texts an attacker sends in a field's place. */
const JSON_VALUES: Record<string, string> = {
  deep_arrays: `${"[".repeat(DEEP)}${"]".repeat(DEEP)}`,
  deep_objects: `${'{"a":'.repeat(DEEP / 2)}1${"}".repeat(DEEP / 2)}`,
  deep_unclosed: "[".repeat(DEEP),
  wide_array: `[${"0,".repeat(200_000)}0]`,
  wide_object: `{${Array.from({ length: 30_000 }, (_, i) => `"k${i}":0`).join(",")}}`,
  huge_string: `"${"x".repeat(900_000)}"`,
  malformed: '{"a": [1, 2,',
  nan: "NaN",
  big_number: "1e400",
};

/** msgpack values (raw bytes) an attacker sends in a field's place. */
const MSGPACK_VALUES: Record<string, Uint8Array> = {
  deep_arrays: concat(new Uint8Array(DEEP).fill(0x91), [0xc0]),
  deep_maps: concat(...Array.from({ length: 20_000 }, () => [0x81, 0xa1, 0x61]), [0xc0]),
  wide_array: concat([0xdd, 0x00, 0x07, 0xa1, 0x20], new Uint8Array(500_000)),
  wide_map: concat([0xde, 0x10, 0x00], ...Array.from({ length: 4096 }, (_, i) => [0xcd, i >> 8, i & 255, 0])),
  huge_string: concat([0xdb, 0x00, 0x0d, 0xbb, 0xa0], new Uint8Array(900_000).fill(0x78)),
  huge_bin: concat([0xc6, 0x00, 0x0d, 0xbb, 0xa0], new Uint8Array(900_000)),
  truncated: new Uint8Array([0xdb, 0xff, 0xff, 0xff, 0xff, 0x61]),
  never_used: new Uint8Array([0xc1]),
  ext: new Uint8Array([0xd4, 0x05, 0x00]),
  uint64_max: new Uint8Array([0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
  nan: new Uint8Array([0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0]),
};

function concat(...parts: ArrayLike<number>[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** `frame` as msgpack with the value at `path` replaced by the raw bytes `value`. */
function msgpackWith(
  frame: Record<string, unknown>,
  path: readonly (string | number)[],
  value: Uint8Array,
): Uint8Array {
  const [head, ...rest] = path;
  if (Array.isArray(frame)) {
    const items = frame.map((item, i) =>
      i === head ? (rest.length ? msgpackWith(item, rest, value) : value) : encode(item),
    );
    return concat([0xdc, items.length >> 8, items.length & 255], ...items);
  }
  const keys = Object.keys(frame);
  if (!keys.includes(String(head))) keys.push(String(head));
  const entries = keys.map((key) => {
    const bytes =
      key === head
        ? rest.length
          ? msgpackWith(frame[key] as Record<string, unknown>, rest, value)
          : value
        : encode(frame[key]);
    return concat(encode(key), bytes);
  });
  return concat([0xde, keys.length >> 8, keys.length & 255], ...entries);
}

/** A valid frame of every client type, and the fields (paths) each case replaces. */
const FRAMES: { frame: Record<string, unknown>; paths: (string | number)[][] }[] = [
  {
    frame: { type: "hello", protocol: 1, client: "fuzz" },
    paths: [["protocol"], ["client"], ["resume"], ["role"]],
  },
  {
    frame: {
      type: "rollout",
      id: "f",
      tags: [{ tag: "Bandit", groups: 1 }],
      mode: "train",
      group_size: 2,
      delivery: "batch",
      sampling: { temperature: 1 },
      filter: { value: 1 },
    },
    paths: [
      ["id"],
      ["tags"],
      ["tags", 0, "tag"],
      ["group_size"],
      ["seed"],
      ["sampling"],
      ["sampling", "temperature"],
      ["sampling", "logit_bias"],
      ["filter", "value"],
      ["max_staleness"],
      ["unknown_field"],
    ],
  },
  { frame: { type: "credit", groups: 1 }, paths: [["groups"]] },
  { frame: { type: "ack", rollout: "f", groups: [0] }, paths: [["rollout"], ["groups"], ["batch"]] },
  { frame: { type: "cancel", rollout: "f" }, paths: [["rollout"]] },
  {
    frame: { type: "env_open", id: "e", tag: "Bandit", groups: 1, group_size: 1 },
    paths: [["id"], ["tag"], ["groups"], ["messages"]],
  },
  {
    frame: { type: "env_step", id: "e", responses: [{ env_id: 0, text: "<answer>1</answer>" }] },
    paths: [
      ["responses"],
      ["responses", 0, "text"],
      ["responses", 0, "sampled_ids"],
      ["responses", 0, "logprobs"],
    ],
  },
  { frame: { type: "env_close", id: "e" }, paths: [["id"]] },
  { frame: { type: "begin_update", id: "u" }, paths: [["id"], ["mode"], ["engines"]] },
  {
    frame: { type: "end_update", id: "u", version: { label: "v1", ordinal: 1 } },
    paths: [["version"], ["version", "label"], ["version", "ordinal"]],
  },
  { frame: { type: "watch" }, paths: [["type"], ["extra"]] },
];

/** Cases for OpenEnv's /ws: a JSON message with VALUE spliced in. */
const OPENENV_MESSAGES: ((value: string) => string)[] = [
  (v) => v,
  (v) => `{"type": ${v}}`,
  (v) => `{"type": "reset", "data": ${v}}`,
  (v) => `{"type": "reset", "data": {"seed": ${v}}}`,
  (v) => `{"type": "reset", "data": {"episode_id": ${v}}}`,
  (v) => `{"type": "step", "data": ${v}}`,
  (v) => `{"type": "step", "data": {"action": ${v}}}`,
  (v) => `{"type": "step", "data": {"action": "Up", "metadata": ${v}}}`,
  (v) => `{"type": "state", "extra": ${v}}`,
];

/** What the hostile remote env answers to reset and step, by case. */
const REMOTE_ANSWERS: Record<string, (v: string) => string> = {
  reward: (v) =>
    `{"type":"observation","data":{"observation":{"text":"t","actions":["Up"]},"reward":${v},"done":false}}`,
  observation: (v) => `{"type":"observation","data":{"observation":${v},"reward":0,"done":false}}`,
  text: (v) => `{"type":"observation","data":{"observation":{"text":${v}},"reward":0,"done":false}}`,
  actions: (v) =>
    `{"type":"observation","data":{"observation":{"text":"t","actions":${v}},"reward":0,"done":false}}`,
  info: (v) =>
    `{"type":"observation","data":{"observation":{"text":"t","info":${v}},"reward":1,"done":true}}`,
  done: (v) => `{"type":"observation","data":{"observation":{"text":"t"},"reward":0,"done":${v}}}`,
  error_code: (v) => `{"type":"error","data":{"code":${v},"message":"m"}}`,
  error_message: (v) => `{"type":"error","data":{"code":"SESSION_ERROR","message":${v}}}`,
  whole: (v) => v,
};

let serve: ChildProcess;
let url: string;
let hostile: WebSocketServer;
let answer: (message: string) => string | Buffer = () => "";
let bystander: TestClient;
let served = 0;

/** The process is alive, /healthz answers, and a bystander's rollout completes. */
async function expectServed(): Promise<void> {
  expect(serve.exitCode).toBe(null);
  expect(serve.signalCode).toBe(null);
  const health = await fetch(`${url}/healthz`);
  expect(health.status).toBe(200);
  const verdict = await playToVerdict(
    bystander,
    rolloutFrame(`b${served++}`, 1, 2, { tags: [{ tag: "Bandit", groups: 1 }], seed: served }),
  );
  expect(verdict).toMatchObject({ type: "batch", failed: 0 });
}

/** Connects, says hello, sends `bytes`, then a probe that every frame before it must be handled for. */
async function mainSocketCase(bytes: Uint8Array, hello: boolean): Promise<Frame | number> {
  const client = await TestClient.connect(url, { hello: hello ? undefined : null });
  client.ws.send(bytes);
  // Frames are handled in order: the probe's answer (or a close) says the case's frame was.
  client.send({ type: "cancel", rollout: "probe-that-does-not-exist" });
  const outcome = await Promise.race([
    client.next((f) => f.type === "error" && f.rollout === "probe-that-does-not-exist").then(() => 0),
    client.closed().then(() => client.closeCode ?? -1),
  ]);
  client.ws.terminate();
  return outcome;
}

beforeAll(async () => {
  let base: string;
  ({ server: hostile, base } = await fakeOpenEnvServer((message) => answer(message)));
  const config = remoteTagConfigFile("Hostile", base, {
    max_sessions: 8,
    check_seed: false,
    step_timeout_s: 20,
    actions: ["Up"],
  });
  ({ url, child: serve } = await spawnServe(["--config", config, "--policy", "random"]));
  bystander = await TestClient.connect(url);
}, 60_000);

afterAll(async () => {
  bystander?.close();
  serve?.kill("SIGKILL");
  await new Promise((resolve) => hostile?.close(resolve));
});

describe("the main socket (msgpack frames)", () => {
  for (const { frame, paths } of FRAMES)
    for (const path of paths)
      it(`${frame.type}.${path.join(".")}: every hostile value is refused or handled, the server serves on`, async () => {
        for (const [name, value] of Object.entries(MSGPACK_VALUES)) {
          const bytes = msgpackWith(frame, path, value);
          const outcome = await mainSocketCase(bytes, frame.type !== "hello");
          // Handled (0), or this connection closed with a documented code; never the process.
          expect([0, 1002, 1009, 4000, 4001, 4003, 4010], name).toContain(outcome);
        }
        await expectServed();
      });

  it("frames that are not msgpack maps: refused, the server serves on", async () => {
    for (const value of Object.values(MSGPACK_VALUES)) expect(await mainSocketCase(value, true)).toBe(1002);
    await expectServed();
  });
});

/** Sends `text` on an OpenEnv session (rollgym's CoordSokoban, or `base`); resolves to its answer (JSON) or the close code. */
async function openenvCase(
  text: string,
  base = `${url}/openenv/CoordSokoban`,
): Promise<Record<string, unknown> | number> {
  const ws = new WebSocket(`${base.replace(/^http/, "ws")}/ws`);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  const outcome = new Promise<Record<string, unknown> | number>((resolve) => {
    ws.once("message", (data) => resolve(JSON.parse(data.toString()) as Record<string, unknown>));
    ws.once("close", (code) => resolve(code));
  });
  ws.send(text);
  const result = await outcome;
  ws.terminate();
  return result;
}

describe("OpenEnv's /ws (JSON frames)", () => {
  for (const [i, message] of OPENENV_MESSAGES.entries())
    it(`message shape ${i} (${message("V")}): an OpenEnv error, the server serves on`, async () => {
      for (const [name, value] of Object.entries(JSON_VALUES)) {
        const reply = await openenvCase(message(value));
        if (typeof reply === "number") expect(reply, name).toBe(1009);
        else {
          expect(reply.type, name).toBe("error");
          // Echoes stay short whatever the input (a preview, never the value).
          expect(JSON.stringify(reply).length, name).toBeLessThan(4_000);
        }
      }
      await expectServed();
    });

  it("a nested-array step action (the issue's 10 KB frame) gets VALIDATION_ERROR or INVALID_JSON", async () => {
    const deep = `${"[".repeat(5_000)}${"]".repeat(5_000)}`;
    const reply = await openenvCase(`{"type": "step", "data": {"action": ${deep}}}`);
    expect(reply).toMatchObject({ type: "error", data: { code: "INVALID_JSON" } });
    expect(String((reply as { data: { message: string } }).data.message)).toContain("nested deeper than 64");
    await expectServed();
  });
});

describe("the Python env provider's /ws (JSON frames)", () => {
  it("every message shape with every hostile value: an OpenEnv error or a close, the provider serves on", async () => {
    const { child, base } = await startPythonProvider(ROOT, [
      "python/examples/guess_number_env.py",
      "--port",
      "0",
      "--workers",
      "1",
    ]);
    try {
      for (const [i, message] of OPENENV_MESSAGES.entries())
        for (const [name, value] of Object.entries(JSON_VALUES)) {
          const reply = await openenvCase(message(value), base);
          if (typeof reply === "number") expect(reply, `${i} ${name}`).toBe(1009);
          else {
            expect(reply.type, `${i} ${name}`).toBe("error");
            expect(JSON.stringify(reply).length, `${i} ${name}`).toBeLessThan(4_000);
          }
          expect(child.exitCode, `${i} ${name}`).toBe(null);
        }
      // A bystander still gets its episode.
      const reset = await openenvCase('{"type": "reset", "data": {"seed": 7}}', base);
      expect(reset).toMatchObject({ type: "observation" });
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("HTTP bodies", () => {
  const post = (path: string, body: string, type = "application/json") =>
    fetch(`${url}${path}`, { method: "POST", headers: { "content-type": type }, body });

  it("OpenEnv's POST /reset and /step: 400 or 422 for every hostile body, the server serves on", async () => {
    for (const path of ["/openenv/CoordSokoban/reset", "/openenv/CoordSokoban/step"])
      for (const shape of [
        (v: string) => v,
        (v: string) => `{"seed": ${v}}`,
        (v: string) => `{"action": ${v}}`,
      ])
        for (const [name, value] of Object.entries(JSON_VALUES)) {
          const response = await post(path, shape(value));
          expect([400, 409, 413, 422], `${path} ${name}`).toContain(response.status);
          expect((await response.text()).length, name).toBeLessThan(4_000);
        }
    await expectServed();
  });

  it("episode-file uploads: 400 naming the line for deep, wide and malformed lines", async () => {
    for (const [name, value] of Object.entries(JSON_VALUES)) {
      const response = await post("/v1/episode-files", `${value}\n`, "application/x-ndjson");
      expect([400, 413, 415], name).toContain(response.status);
    }
    await expectServed();
  });
});

/** One group of the hostile tag, streamed so that a failed group is delivered too. */
const HOSTILE = { tags: [{ tag: "Hostile", groups: 1 }], seed: 1, delivery: "stream" };

describe("answers of a hostile remote OpenEnv env", () => {
  const huge = `"${"y".repeat(20 * 1024 * 1024)}"`;
  const values: Record<string, string> = { ...JSON_VALUES, huge_20MB: huge };
  for (const [field, shape] of Object.entries(REMOTE_ANSWERS))
    it(`${field}: each hostile answer fails only its episodes with a named reason`, async () => {
      const client = await TestClient.connect(url);
      for (const [name, value] of Object.entries(values)) {
        answer = () => shape(value);
        const verdict = await playToVerdict(client, rolloutFrame(`h-${field}-${name}`, 1, 2, HOSTILE));
        expect(verdict.type, name).toBe("batch");
        // Streamed: the group comes whether its episodes failed or not.
        const group = client.of("group").find((g) => g.rollout === `h-${field}-${name}`);
        expect(group?.episodes, name).toHaveLength(2);
        for (const episode of group!.episodes as { failure: string | null }[])
          if (episode.failure !== null)
            expect(episode.failure, name).toMatch(/openenv_|limit|max_held_bytes/);
      }
      client.close();
      answer = () => "";
      await expectServed();
    });

  it("binary frames and an answer before any request: named reasons, the server serves on", async () => {
    const client = await TestClient.connect(url);
    answer = () => Buffer.from([0xff, 0x00]);
    const verdict = await playToVerdict(client, rolloutFrame("h-binary", 1, 2, HOSTILE));
    expect(verdict.type).toBe("batch");
    const [group] = client.of("group").filter((g) => g.rollout === "h-binary");
    for (const episode of group.episodes as { failure: string | null }[])
      expect(episode.failure).toMatch(/openenv_garbage/);
    client.close();
    await expectServed();
  });
});

describe("config files", () => {
  it("a config nested thousands deep, or wide: one line naming the file, exit 2, no stack trace", () => {
    const dir = mkdtempSync(join(tmpdir(), "rollgym-fuzz-config-"));
    const files = {
      deep_flow: `rollgym:\n  x: ${"[".repeat(5_000)}${"]".repeat(5_000)}\n`,
      deep_block: Array.from({ length: 3_000 }, (_, i) => `${"  ".repeat(i)}a:`).join("\n"),
      deep_env_config: `custom_envs:\n  T:\n    env_type: openenv\n    env_config:\n      url: http://x\n      actions: ${"[".repeat(3_000)}${"]".repeat(3_000)}\n`,
      wide: `rollgym:\n${Array.from({ length: 20_000 }, (_, i) => `  k${i}: 1`).join("\n")}\n`,
    };
    for (const [name, text] of Object.entries(files)) {
      const file = join(dir, `${name}.yaml`);
      writeFileSync(file, text);
      const run = spawnSync(process.execPath, ["src/cli/main.ts", "serve", "--port", "0", "--config", file], {
        cwd: ROOT,
        encoding: "utf8",
      });
      expect(run.status, name).toBe(2);
      expect(run.stderr.trim().split("\n"), name).toHaveLength(1);
      expect(run.stderr, name).toContain(file);
      expect(run.stderr, name).not.toMatch(/\bat .*:\d+:\d+/);
    }
  });
});
