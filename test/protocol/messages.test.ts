// Message schemas and validateClientMessage: every spec example is accepted, and each kind of bad
// input is rejected with the right code and field path.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  CLIENT_MESSAGE_SCHEMAS,
  CLIENT_MESSAGE_TYPES,
  type ClientMessage,
  decodeFrame,
  encodeMessage,
  f32Bin,
  hasFrameEnvelope,
  i32Bin,
  PROTOCOL_VERSION,
  type RolloutRequest,
  SERVER_MESSAGE_SCHEMAS,
  type ServerMessage,
  u8Bin,
  validateClientMessage,
  validateServerMessage,
} from "../../protocol/index.ts";
import { arbitraryFor } from "./arbitrary.ts";

const rollout: RolloutRequest = {
  type: "rollout",
  id: "r1",
  tags: [{ tag: "SimpleSokoban", groups: 8 }],
  mode: "train",
  group_size: 16,
  delivery: "stream",
};

const validClient: ClientMessage[] = [
  { type: "hello", protocol: PROTOCOL_VERSION, client: "rollgym-py/0.1.0" },
  { type: "hello", protocol: PROTOCOL_VERSION, client: "", resume: "sess-1" },
  rollout,
  {
    ...rollout,
    tags: [
      { tag: "SimpleSokoban", groups: 100_000 },
      { tag: "FrozenLake", groups: 1 },
    ],
    mode: "val",
    group_size: 4096,
    step: 3,
    seed: 2 ** 32 - 1,
    max_turn: 5,
    max_actions_per_turn: 5,
    think: true,
    sampling: { temperature: 0, top_p: 1, top_k: -1, min_p: 0, max_tokens: 1 },
    filter: {
      strategy: "top_p",
      value: 0.9,
      top_p_mode: "softmax",
      type: "largest",
      include_zero: true,
      metric: "reward_variance",
    },
    delivery: "batch",
  },
  {
    ...rollout,
    sampling: {},
    filter: { strategy: "top_k_abs", value: 4, type: "smallest", metric: "reward_sum" },
  },
  { ...rollout, filter: { strategy: "min_p", top_p_mode: "linear", metric: "reward" } },
  { ...rollout, filter: { strategy: "top_k", value: 0, include_zero: false } },
  { type: "credit", groups: 1 },
  { type: "ack", rollout: "r1", groups: [0, 1, 2] },
  { type: "ack", rollout: "r1", groups: [], batch: true },
  { type: "cancel", rollout: "r1" },
  { type: "env_open", id: "e1", tag: "SimpleSokoban", groups: 2, group_size: 4 },
  {
    type: "env_open",
    id: "e1",
    tag: "SimpleSokoban",
    groups: 2,
    group_size: 4,
    seed: 0,
    mode: "val",
    step: 0,
    think: false,
    max_turn: 1,
    max_actions_per_turn: 1,
  },
  { type: "env_step", id: "e1", responses: [{ env_id: 0, text: "Up</think><answer>Up</answer>" }] },
  { type: "env_step", id: "e1", responses: [] },
  { type: "env_close", id: "e1" },
];

function without(message: object, key: string): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...message };
  delete copy[key];
  return copy;
}

/** Valid messages of every client type; hello speaks our version (others are accepted leniently). */
const anyValidClientMessage = fc
  .constantFrom(...Object.values(CLIENT_MESSAGE_SCHEMAS))
  .chain((schema) => arbitraryFor(schema))
  .map((m) => {
    const message = m as Record<string, unknown>;
    return message["type"] === "hello" ? { ...message, protocol: PROTOCOL_VERSION } : message;
  });

type Failure = { ok: false; code: string; field: string; message: string };

function rejected(value: unknown): Failure {
  const result = validateClientMessage(value);
  if (result.ok) throw new Error(`expected rejection of ${JSON.stringify(value)}`);
  return result;
}

describe("validateClientMessage accepts", () => {
  it.each(validClient.map((m) => [m.type, m] as const))("%s example", (_type, message) => {
    expect(validateClientMessage(message)).toEqual({ ok: true, message });
    // And after a trip over the wire.
    expect(validateClientMessage(decodeFrame(encodeMessage(message)))).toEqual({ ok: true, message });
  });

  for (const [type, schema] of Object.entries(CLIENT_MESSAGE_SCHEMAS)) {
    it(`arbitrary valid ${type} messages`, () => {
      fc.assert(
        fc.property(arbitraryFor(schema), (message) => {
          const result = validateClientMessage(message);
          expect(result.ok).toBe(true);
        }),
        { numRuns: 300 },
      );
    });
  }
});

describe("validateClientMessage rejects", () => {
  it("frames that are not a map with a string type", () => {
    for (const value of [null, 1, "hello", [1, 2], new Uint8Array(2), new Date(0)]) {
      expect(rejected(value)).toMatchObject({ code: "bad_frame", field: "" });
      expect(hasFrameEnvelope(value)).toBe(false);
    }
    for (const value of [{}, { type: 1 }, { type: null }, { type: ["hello"] }]) {
      expect(rejected(value)).toMatchObject({ code: "bad_frame", field: "type" });
      expect(hasFrameEnvelope(value)).toBe(false);
    }
    expect(hasFrameEnvelope({ type: "whatever" })).toBe(true);
  });

  it("unknown types, naming the allowed ones", () => {
    for (const type of ["nope", "", "welcome", "toString", "__proto__", "Hello"]) {
      const failure = rejected({ type });
      expect(failure).toMatchObject({ code: "unknown_type", field: "type" });
      for (const allowed of CLIENT_MESSAGE_TYPES) expect(failure.message).toContain(allowed);
    }
  });

  // [description, message, field, fragments the message must contain]
  const cases: [string, unknown, string, string[]][] = [
    ["wrong type", { ...rollout, group_size: "16" }, "group_size", ['"16"', "integer"]],
    ["float for integer", { ...rollout, group_size: 1.5 }, "group_size", ["1.5", "integer"]],
    ["missing field", without(rollout, "delivery"), "delivery", ["missing", '"batch", "stream"']],
    ["missing nested field", { ...rollout, tags: [{ tag: "a" }] }, "tags[0].groups", ["missing"]],
    [
      "nested out of range",
      { ...rollout, tags: [{ tag: "a", groups: 0 }] },
      "tags[0].groups",
      ["0", "[1, 100000]"],
    ],
    [
      "second tag out of range",
      {
        ...rollout,
        tags: [
          { tag: "a", groups: 1 },
          { tag: "b", groups: 100_001 },
        ],
      },
      "tags[1].groups",
      ["100001"],
    ],
    ["group_size too big", { ...rollout, group_size: 4097 }, "group_size", ["4097", "4096"]],
    ["empty tags", { ...rollout, tags: [] }, "tags", ["0 items"]],
    ["tags not an array", { ...rollout, tags: { tag: "a", groups: 1 } }, "tags", ["a map", "array"]],
    ["empty id", { ...rollout, id: "" }, "id", ['""', "1..200"]],
    ["long id", { ...rollout, id: "x".repeat(201) }, "id", ["201 chars", "1..200"]],
    ["bad mode", { ...rollout, mode: "test" }, "mode", ['"test"', '"train", "val"']],
    ["bad delivery", { ...rollout, delivery: "push" }, "delivery", ['"push"']],
    ["negative seed", { ...rollout, seed: -1 }, "seed", ["-1"]],
    ["seed ≥ 2^32", { ...rollout, seed: 2 ** 32 }, "seed", ["4294967296", "4294967295"]],
    [
      "negative temperature",
      { ...rollout, sampling: { temperature: -0.1 } },
      "sampling.temperature",
      ["-0.1"],
    ],
    [
      "NaN temperature",
      { ...rollout, sampling: { temperature: Number.NaN } },
      "sampling.temperature",
      ["NaN"],
    ],
    ["infinite temperature", { ...rollout, sampling: { temperature: Infinity } }, "sampling.temperature", []],
    ["top_p 0", { ...rollout, sampling: { top_p: 0 } }, "sampling.top_p", ["(0, 1]"]],
    ["top_p > 1", { ...rollout, sampling: { top_p: 1.01 } }, "sampling.top_p", []],
    ["top_k < -1", { ...rollout, sampling: { top_k: -2 } }, "sampling.top_k", []],
    ["min_p > 1", { ...rollout, sampling: { min_p: 2 } }, "sampling.min_p", []],
    ["max_tokens 0", { ...rollout, sampling: { max_tokens: 0 } }, "sampling.max_tokens", []],
    [
      "unknown sampling field",
      { ...rollout, sampling: { temprature: 1 } },
      "sampling.temprature",
      ["temperature"],
    ],
    [
      "bad filter strategy",
      { ...rollout, filter: { strategy: "top_q" } },
      "filter.strategy",
      ['"top_k_abs"'],
    ],
    ["negative filter value", { ...rollout, filter: { value: -1 } }, "filter.value", []],
    ["bad top_p_mode", { ...rollout, filter: { top_p_mode: "cubic" } }, "filter.top_p_mode", []],
    ["bad filter type", { ...rollout, filter: { type: "middle" } }, "filter.type", []],
    [
      "include_zero not bool",
      { ...rollout, filter: { include_zero: 1 } },
      "filter.include_zero",
      ["boolean"],
    ],
    ["bad metric", { ...rollout, filter: { metric: "score" } }, "filter.metric", []],
    ["unknown top-level field", { ...rollout, grop_size: 4 }, "grop_size", ["unknown field", "group_size"]],
    [
      "unknown nested field",
      { ...rollout, tags: [{ tag: "a", groups: 1, n: 2 }] },
      "tags[0].n",
      ["tag, groups"],
    ],
    ["odd field name", { ...rollout, "a b": 1 }, '["a b"]', ["unknown field"]],
    ["hello protocol not integer", { type: "hello", protocol: "1", client: "x" }, "protocol", []],
    ["hello without client", { type: "hello", protocol: 1 }, "client", ["missing"]],
    ["hello empty resume", { type: "hello", protocol: 1, client: "x", resume: "" }, "resume", []],
    ["hello unknown field", { type: "hello", protocol: 1, client: "x", token: "t" }, "token", []],
    ["credit 0", { type: "credit", groups: 0 }, "groups", []],
    ["credit as bin", { type: "credit", groups: new Uint8Array(1) }, "groups", ["bin (1 bytes)"]],
    ["ack group not integer", { type: "ack", rollout: "r", groups: [0, "1"] }, "groups[1]", []],
    ["ack negative group", { type: "ack", rollout: "r", groups: [-1] }, "groups[0]", []],
    ["ack batch not bool", { type: "ack", rollout: "r", groups: [], batch: "yes" }, "batch", []],
    ["cancel without rollout", { type: "cancel" }, "rollout", []],
    ["env_open groups 0", { type: "env_open", id: "e", tag: "t", groups: 0, group_size: 1 }, "groups", []],
    [
      "env_open bad mode",
      { type: "env_open", id: "e", tag: "t", groups: 1, group_size: 1, mode: "eval" },
      "mode",
      [],
    ],
    [
      "env_step negative env id",
      { type: "env_step", id: "e", responses: [{ env_id: -1, text: "" }] },
      "responses[0].env_id",
      [],
    ],
    [
      "env_step text missing",
      { type: "env_step", id: "e", responses: [{ env_id: 0, text: "" }, { env_id: 1 }] },
      "responses[1].text",
      ["missing"],
    ],
    [
      "env_step too many responses",
      {
        type: "env_step",
        id: "e",
        responses: Array.from({ length: 100_001 }, () => ({ env_id: 0, text: "" })),
      },
      "responses",
      ["100001 items", "at most 100000"],
    ],
    [
      "empty bin as sampling",
      { ...rollout, sampling: new Uint8Array(0) },
      "sampling",
      ["bin (0 bytes)", "map"],
    ],
    ["bin as filter", { ...rollout, filter: new Uint8Array(3) }, "filter", ["bin (3 bytes)", "strategy?"]],
    ["timestamp as filter", { ...rollout, filter: new Date(0) }, "filter", ["timestamp"]],
    ["bin as tag", { ...rollout, tags: [new Uint8Array(2)] }, "tags[0]", ["bin (2 bytes)", "{tag, groups}"]],
    [
      "bin as response",
      { type: "env_step", id: "e", responses: [new Uint8Array(1)] },
      "responses[0]",
      ["bin"],
    ],
    ["env_close extra field", { type: "env_close", id: "e", force: true }, "force", []],
  ];

  it.each(cases)("%s", (_description, message, field, fragments) => {
    const failure = rejected(message);
    expect(failure.code).toBe("bad_frame");
    expect(failure.field).toBe(field);
    expect(failure.message.startsWith(`${field}: `)).toBe(true);
    for (const fragment of fragments) expect(failure.message).toContain(fragment);
  });

  it("truncates long bad values in the message", () => {
    const failure = rejected({ ...rollout, mode: "m".repeat(10_000) });
    expect(failure.message.length).toBeLessThan(200);
  });

  it("any top-level field of any message replaced by a wrong-typed value, naming that field", () => {
    // Messages with no field but `type` (watch, unwatch) have nothing to replace.
    const cases = anyValidClientMessage
      .filter((m) => Object.keys(m).length > 1)
      .chain((message) => {
        const keys = Object.keys(message).filter((k) => k !== "type");
        return fc.constantFrom(...keys).map((key) => ({ message, key }));
      });
    fc.assert(
      fc.property(
        cases,
        fc.constantFrom<unknown>(new Uint8Array(1), null, "x".repeat(201)),
        ({ message, key }, bad) => {
          const failure = rejected({ ...message, [key]: bad });
          expect(failure).toMatchObject({ code: "bad_frame", field: key });
        },
      ),
    );
  });

  it("any required field removed, naming it", () => {
    const cases = anyValidClientMessage
      .filter((m) => Object.keys(m).length > 1)
      .chain((message) => {
        const schema = CLIENT_MESSAGE_SCHEMAS[message["type"] as keyof typeof CLIENT_MESSAGE_SCHEMAS];
        return fc
          .constantFrom(...schema.required.filter((k) => k !== "type"))
          .map((key) => ({ message, key }));
      });
    fc.assert(
      fc.property(cases, ({ message, key }) => {
        expect(rejected(without(message, key))).toMatchObject({ code: "bad_frame", field: key });
      }),
    );
  });

  it("any unknown field added, naming it", () => {
    fc.assert(
      fc.property(anyValidClientMessage, (message) => {
        expect(rejected({ ...message, zz_extra: 1 })).toMatchObject({ code: "bad_frame", field: "zz_extra" });
      }),
    );
  });
});

describe("hello with another protocol version", () => {
  it("is accepted so the server can answer protocol_version, keeping protocol and client", () => {
    expect(validateClientMessage({ type: "hello", protocol: 2, client: "future", shiny: true })).toEqual({
      ok: true,
      message: { type: "hello", protocol: 2, client: "future" },
    });
    expect(validateClientMessage({ type: "hello", protocol: 0 })).toEqual({
      ok: true,
      message: { type: "hello", protocol: 0, client: "" },
    });
  });

  it("but a malformed hello of our version is still bad_frame", () => {
    expect(rejected({ type: "hello", protocol: PROTOCOL_VERSION, client: 5 })).toMatchObject({
      field: "client",
    });
    expect(rejected({ type: "hello", protocol: 1.5, client: "x" })).toMatchObject({ field: "protocol" });
  });
});

describe("server messages", () => {
  const episode = { env_id: 0, group: 0, tag: "SimpleSokoban", turns: [], reward: 1, success: true };
  const examples: ServerMessage[] = [
    {
      type: "welcome",
      protocol: PROTOCOL_VERSION,
      server: "rollgym/0.1.0",
      session: "s1",
      resumed: false,
      envs: ["SimpleSokoban"],
      limits: {
        max_frame_bytes: 1 << 20,
        max_rollouts_per_connection: 8,
        max_groups_per_rollout: 4096,
        max_episodes_in_flight: 1024,
        max_buffered_groups: 256,
        resume_grace_s: 60,
      },
    },
    {
      type: "group",
      rollout: "r1",
      group: 0,
      seq: 1,
      tag: "SimpleSokoban",
      seed: 10000,
      kept: null,
      score: null,
      episodes: [episode],
      env_ids_i32: i32Bin([0]),
      scores_f32: f32Bin([1]),
      rewards_f32: f32Bin([1]),
      penalties_f32: f32Bin([0]),
      success_u8: u8Bin([true]),
    },
    {
      type: "batch",
      rollout: "r1",
      kept: [0],
      dropped: [1],
      failed_groups: [],
      metrics: { "train/SimpleSokoban/success": 0.5, "rollout/filter_kept_ratio": Number.NaN },
      episodes: 32,
      failed: 0,
    },
    { type: "progress", rollout: "r1", episodes_done: 3, episodes_total: 32, groups_done: 0, failed: 0 },
    { type: "error", code: "bad_frame", message: "tags[0].groups: missing", field: "tags[0].groups" },
    { type: "error", code: "unknown_rollout", message: "no rollout r9", rollout: "r9" },
    {
      type: "env_opened",
      id: "e1",
      episodes: [{ env_id: 0, group: 0, seed: 1, messages: [{ role: "system", content: "hi" }] }],
    },
    {
      type: "env_stepped",
      id: "e1",
      results: [
        {
          env_id: 0,
          parsed: ["Up"],
          actions: ["Up"],
          reward: -0.1,
          reward_text: "",
          format_penalty: false,
          done: true,
          success: false,
          messages: null,
        },
      ],
    },
    { type: "env_closed", id: "e1", episodes: [episode], metrics: {} },
    { type: "closing", reason: "SIGTERM", deadline_ms: 30_000 },
  ];

  it.each(examples.map((m) => [m.type, m] as const))(
    "accepts a %s example over the wire",
    (_type, message) => {
      expect(validateServerMessage(decodeFrame(encodeMessage(message))).ok).toBe(true);
    },
  );

  for (const [type, schema] of Object.entries(SERVER_MESSAGE_SCHEMAS)) {
    it(`accepts arbitrary valid ${type} messages`, () => {
      fc.assert(
        fc.property(arbitraryFor(schema), (message) => {
          expect(validateServerMessage(message).ok).toBe(true);
        }),
        { numRuns: 100 },
      );
    });
  }

  it("rejects typed arrays sent as msgpack arrays, bins as maps, and client types", () => {
    const group = examples[1] as Record<string, unknown>;
    expect(validateServerMessage({ ...group, success_u8: [1] })).toMatchObject({
      ok: false,
      field: "success_u8",
    });
    expect(validateServerMessage({ ...group, episodes: [new Uint8Array(2)] })).toMatchObject({
      ok: false,
      field: "episodes[0]",
    });
    expect(validateServerMessage({ ...examples[2], metrics: new Uint8Array(0) })).toMatchObject({
      ok: false,
      field: "metrics",
    });
    expect(validateServerMessage({ type: "hello", protocol: 1, client: "x" })).toMatchObject({
      ok: false,
      code: "unknown_type",
    });
  });
});
