// Weight updates with requests in flight (issue #22), against the mock vLLM engine over real
// HTTP: every pause mode, the abort-and-continue fallback of an engine without /pause, paused
// time off the timeouts and the retry budget, a replica that fails to pause, and the version
// stamps checked against the engine's own record of which loaded weights made each token.
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import type { Version } from "../../protocol/messages.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { PolicyRequest } from "../../src/llm/policy.ts";
import { UpdateStateError } from "../../src/llm/version-book.ts";
import {
  DEFAULT_MODEL,
  type MockEngine,
  type MockEngineOptions,
  startMockEngine,
} from "../../src/mock-engine/server.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { ordinalOf } from "../helpers/engine-versions.ts";
import { startGateway } from "../helpers/gateway.ts";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

async function engine(options: MockEngineOptions = {}): Promise<MockEngine> {
  const started = await startMockEngine({ tpotMs: 20, ...options });
  open.push(started);
  return started;
}

async function policyOn(
  engines: readonly { url: string }[],
  options: Partial<ConstructorParameters<typeof ChatPolicy>[0]> = {},
): Promise<ChatPolicy> {
  const policy = new ChatPolicy({
    baseURL: engines.map((e) => e.url),
    model: DEFAULT_MODEL,
    backoffMs: 20,
    ...options,
  });
  open.push(policy);
  await policy.preflight();
  return policy;
}

const SAMPLING = {
  ...defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 1 }], groupSize: 1 }).sampling,
};

function chatTurn(i: number, signal?: AbortSignal): PolicyRequest {
  return {
    messages: [
      { role: "system", content: "You are solving Sokoban." },
      { role: "user", content: `Turn 1, episode ${i}: push the box.` },
    ],
    prefill: "<think>",
    sampling: { ...SAMPLING, max_tokens: 200, seed: 1000 + i },
    episode: {
      tag: "SimpleSokoban",
      envId: i,
      turn: 0,
      actionNames: ["Up", "Down", "Left", "Right"],
      actionsThisTurn: 1,
      think: true,
      solve: () => ["Up"],
    },
    affinity: `episode-${i}`,
    signal,
  };
}

async function waitFor(what: string, condition: () => boolean): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (condition()) return;
    await sleep(5);
  }
  throw new Error(`timed out waiting for ${what}`);
}

const STEP_1: Version = { label: "step-1", ordinal: 1 };

describe("weight updates in each pause mode, chat turns in flight", () => {
  it("keep: in-flight turns freeze, finish after resume and span the update; new turns wait and run on the new version", async () => {
    const mock = await engine();
    const policy = await policyOn([mock]);
    const updates = policy.updates();
    const turns = [0, 1, 2, 3].map((i) => policy.generate(chatTurn(i)));
    await waitFor("four running requests", () => mock.stats().running === 4);

    const begun = await updates.begin("keep");
    expect(begun).toEqual({ paused: 1, aborted: 0, out_of_routing: [], in_flight: 4, refused: [] });
    expect(mock.isPaused()).toBe(true);
    expect(updates.updating).toBe(true);
    const late = policy.generate(chatTurn(9));
    await sleep(100);
    // Held by the policy's own admission: it never reached the (paused) engine.
    expect(mock.stats().generations).toBe(4);

    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    expect(mock.isPaused()).toBe(false);
    expect(mock.weights()).toEqual({ loaded: "step-1", label: "step-1" });
    expect(updates.current).toEqual(STEP_1);

    for (const answer of await Promise.all(turns))
      expect(answer.versions).toEqual({ dispatch: 0, completion: 1 });
    expect((await late).versions).toEqual({ dispatch: 1, completion: 1 });
    const records = mock.generations();
    expect(records).toHaveLength(5);
    // From the engine's side: the frozen requests made tokens under both weights (they span).
    for (const r of records.slice(0, 4)) {
      expect(r.versions[0]).toBe("default");
      expect(r.versions.at(-1)).toBe("step-1");
      expect(r.cache_salt).toBeNull();
    }
    expect(new Set(records[4].versions)).toEqual(new Set(["step-1"]));
    // The new version's requests carry its label as cache_salt, and the session header routes them.
    expect(records[4].cache_salt).toBe("step-1");
    expect(mock.stats().prefixCacheBySalt["step-1"]?.queries).toBeGreaterThan(0);
  });

  it("wait: begin() answers once the running turns are done, all of them under the old version", async () => {
    const mock = await engine();
    const policy = await policyOn([mock]);
    const updates = policy.updates();
    let finished = 0;
    const turns = [0, 1, 2].map((i) =>
      policy.generate(chatTurn(i)).then((answer) => {
        finished++;
        return answer;
      }),
    );
    await waitFor("three running requests", () => mock.stats().running === 3);
    const begun = await updates.begin("wait");
    expect(begun.paused).toBe(1);
    expect(mock.stats().running).toBe(0);
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    for (const answer of await Promise.all(turns))
      expect(answer.versions).toEqual({ dispatch: 0, completion: 0 });
    expect(finished).toBe(3);
    for (const r of mock.generations()) expect(new Set(r.versions)).toEqual(new Set(["default"]));
  });

  it("abort: in-flight turns end with finish_reason abort and are asked again after the update, without retries or failures", async () => {
    const mock = await engine();
    const policy = await policyOn([mock]);
    const updates = policy.updates();
    const turns = [0, 1, 2].map((i) => policy.generate(chatTurn(i)));
    await waitFor("three running requests", () => mock.stats().running === 3);
    await updates.begin("abort");
    expect(mock.stats().pauseAborts).toBe(3);
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    for (const answer of await Promise.all(turns)) {
      expect(answer.versions).toEqual({ dispatch: 1, completion: 1 });
      expect(answer.finishReason).not.toBe("abort");
    }
    expect(policy.stats).toMatchObject({ interrupted: 3, retries: 0, failures: 0 });
    const records = mock.generations();
    expect(records.map((r) => r.finish_reason).filter((f) => f === "abort")).toHaveLength(3);
    for (const r of records.filter((x) => x.finish_reason !== "abort"))
      expect(new Set(r.versions)).toEqual(new Set(["step-1"]));
  });

  it("an engine without /pause: in-flight turns are interrupted and asked again after the update", async () => {
    const mock = await engine({ pauseRoutes: false });
    const policy = await policyOn([mock]);
    const updates = policy.updates();
    const turns = [0, 1].map((i) => policy.generate(chatTurn(i)));
    await waitFor("two running requests", () => mock.stats().running === 2);
    expect(await updates.begin("keep")).toEqual({
      paused: 0,
      aborted: 1,
      out_of_routing: [],
      in_flight: 2,
      refused: [],
    });
    await waitFor("the aborted requests to leave", () => mock.stats().running === 0);
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    for (const answer of await Promise.all(turns))
      expect(answer.versions).toEqual({ dispatch: 1, completion: 1 });
    const answered = mock.generations().filter((r) => r.finish_reason !== "client_closed");
    expect(answered).toHaveLength(2);
    // Never scored twice: each turn's answer is the one complete request.
    for (const r of answered) expect(new Set(r.versions)).toEqual(new Set(["step-1"]));
  });
});

describe("token mode across an update", () => {
  async function tokenSetup(options: MockEngineOptions) {
    const mock = await engine({ tokenizer: "qwen3", ...options });
    const policy = await policyOn([mock], { streamForUpdates: true });
    const updates = policy.updates();
    const tokens = policy.tokenEngine()!;
    const prompt = await tokens.firstPrompt(chatTurn(0).messages, "<think>", "t");
    return { mock, policy, updates, tokens, prompt };
  }

  for (const [name, options, mode] of [
    ["vLLM's /pause?mode=abort returns the partial answer", {}, "abort"],
    ["an engine without /pause (streamed, interrupted)", { pauseRoutes: false }, "keep"],
  ] as const) {
    it(`${name}: the turn goes on from the exact ids already sampled, each segment stamped with its version`, async () => {
      const { mock, policy, updates, tokens, prompt } = await tokenSetup(options);
      const sampling = { ...SAMPLING, max_tokens: 200, seed: 7 };
      const turn = tokens.generate(prompt, sampling, "t");
      await waitFor("a few tokens", () => mock.stats().decodedTokens >= 4);
      await updates.begin(mode);
      mock.loadWeights("step-1");
      await updates.end(STEP_1);
      const sample = await turn;

      expect(sample.segments).toBe(2);
      expect(policy.stats.failures).toBe(0);
      const [first, second] = mock.generations().filter((r) => r.choices[0].length > 0);
      expect(first.choices[0].length).toBeGreaterThan(0);
      // The continuation's prompt is the prompt plus exactly the ids kept of the first request:
      // all it made (an abort answer), or what arrived before the stream was closed.
      const kept = second.prompt_ids.slice(prompt.length);
      expect(second.prompt_ids.slice(0, prompt.length)).toEqual(prompt);
      expect(kept.length).toBeGreaterThan(0);
      expect(first.choices[0].slice(0, kept.length)).toEqual(kept);
      if (mode === "abort") expect(kept).toEqual(first.choices[0]);
      expect(sample.ids).toEqual([...kept, ...second.choices[0]]);
      expect(sample.logprobs).toHaveLength(sample.ids.length);
      expect(sample.versions).toEqual(
        [...first.versions.slice(0, kept.length), ...second.versions].map(ordinalOf),
      );
      expect(new Set(first.versions)).toEqual(new Set(["default"]));
      expect(sample.turnVersions).toEqual({ dispatch: 0, completion: 1 });
      // max_tokens was lowered by what the first segment produced.
      expect(sample.ids.length).toBeLessThanOrEqual(200);
    });
  }

  it("keep: a turn that spans the pause is marked (dispatch ≠ completion), its ids stamped with the dispatch version, a lower bound", async () => {
    const { mock, updates, tokens, prompt } = await tokenSetup({});
    const turn = tokens.generate(prompt, { ...SAMPLING, max_tokens: 200, seed: 7 }, "t");
    await waitFor("a few tokens", () => mock.stats().decodedTokens >= 4);
    await updates.begin("keep");
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    const sample = await turn;
    expect(sample.segments).toBe(1);
    expect(sample.turnVersions).toEqual({ dispatch: 0, completion: 1 });
    const [record] = mock.generations();
    expect(record.choices[0]).toEqual(sample.ids);
    expect(new Set(record.versions)).toEqual(new Set(["default", "step-1"]));
    record.versions.forEach((v, i) => {
      expect(sample.versions[i]).toBeLessThanOrEqual(ordinalOf(v));
    });
    expect(new Set(sample.versions)).toEqual(new Set([0]));
  });
});

describe("a turn still on its way to the engine when the pause lands", () => {
  // A gateway holds the request after rollgym sent it (dispatched under version 0) until the
  // engine is paused; the engine then keeps it unsampled until /resume, so it runs wholly on the
  // new weights. Where the pause ends or finishes every request the engine held (abort, wait), a
  // whole answer after it can only be such a request: its stamp is exact. A keep pause also
  // freezes requests half-way, which no answer tells apart: the lower bound stays.
  async function behindGateway() {
    const mock = await engine({ tokenizer: "qwen3" });
    const gateway = await startGateway(mock.url);
    open.push(gateway);
    const policy = await policyOn([gateway]);
    return { mock, gateway, policy, updates: policy.updates() };
  }

  for (const mode of ["abort", "wait", "keep"] as const) {
    const exact = mode !== "keep";
    it(`${mode}: a token turn answered whole after the update ${exact ? "carries the new version exactly" : "keeps the dispatch version, a lower bound"}, as the engine's record says`, async () => {
      const { mock, gateway, policy, updates } = await behindGateway();
      const tokens = policy.tokenEngine()!;
      const prompt = await tokens.firstPrompt(chatTurn(0).messages, "<think>", "t");
      gateway.hold("/v1/completions");
      const turn = tokens.generate(prompt, { ...SAMPLING, max_tokens: 200, seed: 7 }, "t");
      await waitFor("the request held on its way", () => gateway.held === 1);
      expect(await updates.begin(mode)).toEqual({
        paused: 1,
        aborted: 0,
        out_of_routing: [],
        in_flight: 1,
        refused: [],
      });
      const accepted = mock.stats().generations;
      gateway.release();
      await waitFor("the paused engine to take it", () => mock.stats().generations === accepted + 1);
      mock.loadWeights("step-1");
      await updates.end(STEP_1);
      const sample = await turn;

      expect(sample.segments).toBe(1);
      const records = mock.generations().filter((r) => r.prompt_ids.length === prompt.length);
      expect(records).toHaveLength(1);
      expect(records[0].choices[0]).toEqual(sample.ids);
      expect(new Set(records[0].versions)).toEqual(new Set(["step-1"]));
      if (exact) {
        expect(sample.turnVersions).toEqual({ dispatch: 1, completion: 1 });
        expect(sample.versions).toEqual(records[0].versions.map(ordinalOf));
      } else {
        expect(sample.turnVersions).toEqual({ dispatch: 0, completion: 1 });
        expect(new Set(sample.versions)).toEqual(new Set([0]));
      }
    });
  }

  it("abort: a chat turn answered whole after the update is stamped with the new version, not as spanning", async () => {
    const { mock, gateway, policy, updates } = await behindGateway();
    gateway.hold("/v1/chat/completions");
    const turn = policy.generate(chatTurn(0));
    await waitFor("the request held on its way", () => gateway.held === 1);
    await updates.begin("abort");
    gateway.release();
    await waitFor("the paused engine to take it", () => mock.stats().generations === 1);
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    expect((await turn).versions).toEqual({ dispatch: 1, completion: 1 });
    const [record] = mock.generations();
    expect(record.finish_reason).not.toBe("abort");
    expect(new Set(record.versions)).toEqual(new Set(["step-1"]));
    expect(policy.stats).toMatchObject({ interrupted: 0, retries: 0, failures: 0 });
  });
});

describe("what requests carry for routers and caches", () => {
  it("X-Session-ID per episode always; cache_salt = the version label once named, unless cache_salt=off", async () => {
    for (const cacheSalt of ["version", "off"] as const) {
      const mock = await engine();
      const policy = await policyOn([mock], { cacheSalt });
      await policy.generate(chatTurn(0));
      const updates = policy.updates();
      await updates.begin();
      await updates.end(STEP_1);
      await policy.generate(chatTurn(1));
      const [before, after] = mock.generations();
      expect([before.session, after.session]).toEqual(["episode-0", "episode-1"]);
      expect([before.cache_salt, after.cache_salt]).toEqual([
        null,
        cacheSalt === "version" ? "step-1" : null,
      ]);
    }
  });
});

describe("paused time, failures and misuse", () => {
  it("time paused counts against neither the request timeout nor the retry budget", async () => {
    const mock = await engine({ tpotMs: 5 });
    const policy = await policyOn([mock], { timeoutMs: 400, retryBudgetMs: 400, maxRetries: 0 });
    const updates = policy.updates();
    const turns = [0, 1].map((i) => policy.generate(chatTurn(i)));
    await waitFor("two running requests", () => mock.stats().running === 2);
    await updates.begin("keep");
    const held = policy.generate(chatTurn(5));
    // Frozen and held for three times the timeout and the budget.
    await sleep(1200);
    mock.loadWeights("step-1");
    await updates.end(STEP_1);
    const answers = await Promise.all([...turns, held]);
    expect(answers.map((a) => a.finishReason).every((f) => f === "stop" || f === "length")).toBe(true);
    // The frozen requests were not timed out and sent again: each of the three ran once.
    expect(policy.stats).toMatchObject({ failures: 0, retries: 0, interrupted: 0 });
    expect(mock.generations()).toHaveLength(3);
    expect(updates.updating).toBe(false);
  });

  it("a replica that fails to pause is taken out of routing; its in-flight turns go to the others after the update", async () => {
    const [a, b] = [await engine(), await engine()];
    const policy = await policyOn([a, b], { concurrency: 2 });
    const updates = policy.updates();
    const turns = [0, 1, 2, 3].map((i) => policy.generate(chatTurn(i)));
    await waitFor("both replicas busy", () => a.stats().running === 2 && b.stats().running === 2);
    a.setOutage("503");
    const begun = await updates.begin("keep");
    expect(begun).toMatchObject({ paused: 1, aborted: 0, out_of_routing: [a.url], in_flight: 4 });
    expect(policy.replicas().find((r) => r.url === a.url)?.healthy).toBe(false);
    b.loadWeights("step-1");
    await updates.end(STEP_1);
    const answers = await Promise.all(turns);
    expect(answers.every((x) => x.versions !== undefined)).toBe(true);
    // Nothing answered by the replica that was left unpaused; the other served all four.
    expect(
      a.generations().filter((r) => r.finish_reason === "stop" || r.finish_reason === "length"),
    ).toHaveLength(0);
    expect(
      b.generations().filter((r) => r.finish_reason === "stop" || r.finish_reason === "length"),
    ).toHaveLength(4);
    expect(policy.stats.failures).toBe(0);
  });

  it("begin with zero in flight; a second begin, an end without begin and a bad version are refused", async () => {
    const mock = await engine();
    const policy = await policyOn([mock]);
    const updates = policy.updates();
    await expect(updates.end(STEP_1)).rejects.toThrow(UpdateStateError);
    expect(await updates.begin()).toEqual({
      paused: 1,
      aborted: 0,
      out_of_routing: [],
      in_flight: 0,
      refused: [],
    });
    await expect(updates.begin()).rejects.toThrow(/already open/);
    await expect(updates.end({ label: "", ordinal: 1 })).rejects.toThrow(
      /version\.label "" is not a non-empty string/,
    );
    await expect(updates.end({ label: "x", ordinal: -1 })).rejects.toThrow(/version\.ordinal -1/);
    // Ordinals are int32 in token_versions_i32: one past 2³¹−1 would wrap.
    await expect(updates.end({ label: "x", ordinal: 2 ** 31 })).rejects.toThrow(
      "version.ordinal 2147483648 is not an integer from the current ordinal 0 to 2147483647",
    );
    expect(updates.updating).toBe(true);
    await updates.end(STEP_1);
    expect(mock.isPaused()).toBe(false);
    expect(mock.weights().label).toBe("step-1");
    await expect(updates.begin("fast" as never)).rejects.toThrow(
      /pause mode "fast" is not one of keep, wait, abort/,
    );
  });
});
