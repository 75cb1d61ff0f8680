// Weight updates when replicas misbehave (issue #30), against the mock vLLM engine over real
// HTTP: clear_cache on every /pause as configured, a /resume retried until the engine says it
// is not paused, a replica that stays paused kept out of routing with its reason (its probe
// reads /is_paused, not only /v1/models) and listed in failed_to_resume, a refused /pause listed
// in update_begun.refused, and an update that fails when no replica paused.
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import type { Version } from "../../protocol/messages.ts";
import { EngineUpdates, type UpdateHost, UpdateInterrupted } from "../../src/llm/engine-updates.ts";
import { EngineError } from "../../src/llm/http.ts";
import { ChatPolicy } from "../../src/llm/openai-chat.ts";
import type { PolicyRequest } from "../../src/llm/policy.ts";
import {
  DEFAULT_MODEL,
  type MockEngine,
  type MockEngineOptions,
  startMockEngine,
} from "../../src/mock-engine/server.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { engineProxy } from "../helpers/engine-proxy.ts";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function engine(options: MockEngineOptions = {}): Promise<MockEngine> {
  const started = await startMockEngine({ tpotMs: 20, ...options });
  open.push(started);
  return started;
}

async function policyOn(
  urls: readonly string[],
  options: Partial<ConstructorParameters<typeof ChatPolicy>[0]> = {},
): Promise<ChatPolicy> {
  const policy = new ChatPolicy({ baseURL: urls, model: DEFAULT_MODEL, backoffMs: 20, ...options });
  open.push(policy);
  await policy.preflight();
  return policy;
}

const SAMPLING = {
  ...defaultBatchRequest("train", { tags: [{ tag: "SimpleSokoban", groups: 1 }], groupSize: 1 }).sampling,
};

function chatTurn(i: number): PolicyRequest {
  return {
    messages: [
      { role: "system", content: "You are solving Sokoban." },
      { role: "user", content: `Turn 1, episode ${i}: push the box.` },
    ],
    prefill: "<think>",
    sampling: { ...SAMPLING, max_tokens: 200, seed: 2000 + i },
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
  };
}

async function waitFor(what: string, condition: () => boolean): Promise<void> {
  for (let i = 0; i < 4000; i++) {
    if (condition()) return;
    await sleep(5);
  }
  throw new Error(`timed out waiting for ${what}`);
}

const STEP_1: Version = { label: "step-1", ordinal: 1 };
const STEP_2: Version = { label: "step-2", ordinal: 2 };
const STEP_3: Version = { label: "step-3", ordinal: 3 };

function replicaOf(policy: ChatPolicy, url: string) {
  const replica = policy.replicas().find((r) => r.url === url);
  if (!replica) throw new Error(`${url} is not a replica`);
  return replica;
}

describe("clear_cache on every /pause", () => {
  for (const clear of [false, true]) {
    it(`pauseClearCache ${clear}: every /pause of every mode says clear_cache=${clear}; a keep pause's frozen requests ${clear ? "are prefilled again" : "keep their cache"}`, async () => {
      const mock = await engine();
      const proxy = await engineProxy(mock.url.slice(0, -"/v1".length));
      open.push(proxy);
      const policy = await policyOn([`${proxy.url}/v1`], clear ? { pauseClearCache: true } : {});
      const updates = policy.updates();
      const turns = [0, 1].map((i) => policy.generate(chatTurn(i)));
      await waitFor("two running requests", () => mock.stats().running === 2);
      await updates.begin("keep");
      await updates.end(STEP_1);
      await Promise.all(turns);
      for (const [mode, version] of [
        ["wait", STEP_2],
        ["abort", STEP_3],
      ] as const) {
        await updates.begin(mode);
        await updates.end(version);
      }
      const pauses = proxy.requests.filter((r) => r.path.startsWith("/pause"));
      expect(pauses.map((r) => new URL(r.path, proxy.url).searchParams.get("mode"))).toEqual([
        "keep",
        "wait",
        "abort",
      ]);
      for (const pause of pauses)
        expect(new URL(pause.path, proxy.url).searchParams.get("clear_cache")).toBe(String(clear));
      // The engine's own count: the two frozen requests were prefilled again only when cleared.
      expect(mock.stats().pauseCacheClears).toBe(clear ? 3 : 0);
      expect(mock.stats().reprefills).toBe(clear ? 2 : 0);
      expect(policy.stats.failures).toBe(0);
    });
  }
});

describe("a /resume that fails", () => {
  it("once: it is retried; the replica stays in routing and its frozen turns finish on it", async () => {
    const mock = await engine();
    const policy = await policyOn([mock.url]);
    const updates = policy.updates();
    const turns = [0, 1].map((i) => policy.generate(chatTurn(i)));
    await waitFor("two running requests", () => mock.stats().running === 2);
    await updates.begin("keep");
    mock.failResume(1);
    expect(await updates.end(STEP_1)).toEqual({ failed_to_resume: [] });
    expect(mock.isPaused()).toBe(false);
    const answers = await Promise.all(turns);
    expect(answers.every((a) => a.finishReason === "stop" || a.finishReason === "length")).toBe(true);
    // Frozen, then finished where they were: none interrupted and asked again.
    expect(policy.stats).toMatchObject({ failures: 0, interrupted: 0 });
    expect(replicaOf(policy, mock.url)).toMatchObject({ healthy: true, reason: null });
  });

  it("every time: listed in failed_to_resume, kept out of routing with its reason while paused, resumed by its probe once it can be", async () => {
    const [a, b] = [await engine(), await engine()];
    const policy = await policyOn([a.url, b.url], { concurrency: 2 });
    const updates = policy.updates();
    const turns = [0, 1, 2, 3].map((i) => policy.generate(chatTurn(i)));
    await waitFor("both replicas busy", () => a.stats().running === 2 && b.stats().running === 2);
    await updates.begin("keep");
    a.failResume(1000);
    const ended = await updates.end(STEP_1);
    expect(ended.failed_to_resume).toEqual([
      { url: a.url, reason: expect.stringContaining("Failed to resume generation") },
    ]);
    expect(ended.failed_to_resume[0].reason).toContain("(4 attempts)");
    expect(a.isPaused()).toBe(true);
    // Its frozen turns went to the other replica; no turn failed.
    expect(await Promise.all(turns)).toHaveLength(4);
    expect(policy.stats.failures).toBe(0);
    const arrived = a.stats().arrivedWhilePaused;

    // Its probe finds /v1/models answering but the engine paused: it stays out, saying why.
    await waitFor("a failed probe", () => (replicaOf(policy, a.url).reason ?? "").includes("last probe"));
    expect(replicaOf(policy, a.url)).toMatchObject({
      healthy: false,
      reason: expect.stringMatching(/failed to resume after a weight update.*last probe: paused outside/),
    });
    await Promise.all([4, 5, 6, 7].map((i) => policy.generate(chatTurn(i))));
    expect(a.stats().arrivedWhilePaused).toBe(arrived);

    // Once /resume works, the probe resumes the replica rollgym paused and routes to it again.
    a.failResume(0);
    await waitFor("the replica back in routing", () => replicaOf(policy, a.url).healthy);
    expect(a.isPaused()).toBe(false);
    expect(replicaOf(policy, a.url).reason).toBeNull();
    expect(a.stats().arrivedWhilePaused).toBe(arrived);
  });

  it("a replica killed mid-update: listed in failed_to_resume, its turns finish elsewhere, back once it restarts", async () => {
    const [a, b] = [await engine(), await engine()];
    const policy = await policyOn([a.url, b.url], { concurrency: 2 });
    const updates = policy.updates();
    const turns = [0, 1, 2, 3].map((i) => policy.generate(chatTurn(i)));
    await waitFor("both replicas busy", () => a.stats().running === 2 && b.stats().running === 2);
    await updates.begin("keep");
    a.setOutage("reset");
    const ended = await updates.end(STEP_1);
    expect(ended.failed_to_resume).toEqual([
      { url: a.url, reason: expect.stringMatching(/^POST .*: connection error .* \(4 attempts\)$/) },
    ]);
    expect(await Promise.all(turns)).toHaveLength(4);
    expect(policy.stats.failures).toBe(0);
    expect(replicaOf(policy, a.url).healthy).toBe(false);
    // A restart comes back unpaused.
    a.resume();
    a.setOutage(null);
    await waitFor("the replica back in routing", () => replicaOf(policy, a.url).healthy);
  });
});

describe("a /pause that is refused", () => {
  it("by one replica: listed in update_begun.refused with the engine's reason; its turns go to the one that paused", async () => {
    const [a, b] = [await engine(), await engine()];
    const policy = await policyOn([a.url, b.url], { concurrency: 2 });
    const updates = policy.updates();
    const turns = [0, 1, 2, 3].map((i) => policy.generate(chatTurn(i)));
    await waitFor("both replicas busy", () => a.stats().running === 2 && b.stats().running === 2);
    a.refusePause("CUDA out of memory");
    const begun = await updates.begin("keep");
    expect(begun).toEqual({
      paused: 1,
      aborted: 0,
      out_of_routing: [a.url],
      in_flight: 4,
      refused: [
        { url: a.url, reason: expect.stringContaining("Failed to pause generation: CUDA out of memory") },
      ],
    });
    expect(replicaOf(policy, a.url).reason).toContain("refused to pause");
    await updates.end(STEP_1);
    expect(await Promise.all(turns)).toHaveLength(4);
    expect(policy.stats.failures).toBe(0);
  });

  it("by every replica asked: begin fails, admission is open, nothing is paused, and no turn fails", async () => {
    const mock = await engine();
    const policy = await policyOn([mock.url]);
    const updates = policy.updates();
    const turns = [0, 1].map((i) => policy.generate(chatTurn(i)));
    await waitFor("two running requests", () => mock.stats().running === 2);
    mock.refusePause("CUDA out of memory");
    await expect(updates.begin("keep")).rejects.toThrow(
      /no replica paused: .* refused \(POST .*\/pause: HTTP 500: Failed to pause generation: CUDA out of memory\)/,
    );
    expect(updates.updating).toBe(false);
    expect(mock.isPaused()).toBe(false);
    mock.refusePause(null);
    // The interrupted turns run again once the replica is back; new turns are not held.
    const answers = await Promise.all([...turns, policy.generate(chatTurn(2))]);
    expect(answers).toHaveLength(3);
    expect(policy.stats.failures).toBe(0);
    expect(updates.current).toEqual({ label: "initial", ordinal: 0 });
    // The next update works.
    expect((await updates.begin("keep")).paused).toBe(1);
    expect(await updates.end(STEP_1)).toEqual({ failed_to_resume: [] });
  });
});

describe("the probe's reading of /is_paused", () => {
  /** A host whose every control request answers `answer` (or throws it). */
  function hostAnswering(answer: unknown, asked: string[]): UpdateHost {
    return {
      urls: ["http://r0/v1"],
      control: async (method, url) => {
        asked.push(`${method} ${url}`);
        if (answer instanceof Error) throw answer;
        return answer;
      },
      isHealthy: () => true,
      takeOut: () => {},
    };
  }

  it("lets a replica back when it is not paused, or has no pause routes", async () => {
    const asked: string[] = [];
    await new EngineUpdates(hostAnswering({ is_paused: false }, asked)).checkNotPaused("http://r0/v1");
    await new EngineUpdates(hostAnswering(new EngineError("HTTP 404: Not Found", 404), asked)).checkNotPaused(
      "http://r0/v1",
    );
    // A gateway that refuses the route says nothing of a pause; an engine failing it is not ready.
    await new EngineUpdates(hostAnswering(new EngineError("HTTP 403: Forbidden", 403), asked)).checkNotPaused(
      "http://r0/v1",
    );
    await expect(
      new EngineUpdates(hostAnswering(new EngineError("HTTP 500: Failed", 500), asked)).checkNotPaused(
        "http://r0/v1",
      ),
    ).rejects.toThrow("HTTP 500: Failed");
    expect(asked).toEqual(Array(4).fill("GET http://r0/is_paused"));
  });

  it("keeps out one paused by someone else, naming why, and never resumes it", async () => {
    const asked: string[] = [];
    await expect(
      new EngineUpdates(hostAnswering({ is_paused: true }, asked)).checkNotPaused("http://r0/v1"),
    ).rejects.toThrow(
      "GET http://r0/is_paused answered true outside a weight update, and rollgym did not pause it: out of routing until it is resumed",
    );
    expect(asked).toEqual(["GET http://r0/is_paused"]);
  });

  it("keeps out one paused while an update is open", async () => {
    const asked: string[] = [];
    const updates = new EngineUpdates(hostAnswering({ is_paused: true, status: "paused" }, asked));
    await updates.begin("keep");
    await expect(updates.checkNotPaused("http://r0/v1")).rejects.toThrow(
      "GET http://r0/is_paused answered true while a weight update is open",
    );
    expect(asked.filter((a) => a.includes("/resume"))).toEqual([]);
  });
});

describe("dispatch tracking", () => {
  const host: UpdateHost = {
    urls: ["http://r0/v1", "http://r1/v1"],
    control: async () => ({}),
    isHealthy: () => true,
    takeOut: () => {},
  };

  it("interrupts every request in flight on a replica, under any parent signal, and only those", async () => {
    const updates = new EngineUpdates(host);
    const rollout = new AbortController();
    const other = new AbortController();
    const a = updates.dispatch("http://r0/v1", rollout.signal);
    const b = updates.dispatch("http://r0/v1", other.signal);
    const c = updates.dispatch("http://r0/v1");
    const elsewhere = updates.dispatch("http://r1/v1", rollout.signal);
    const finished = updates.dispatch("http://r0/v1", rollout.signal);
    finished.done();
    finished.done();
    expect(updates.inFlight).toBe(4);
    const interrupted = updates.interrupt("http://r0/v1");
    for (const request of [a, b, c]) expect(request.signal.reason).toBeInstanceOf(UpdateInterrupted);
    expect(elsewhere.signal.aborted).toBe(false);
    // Sent after the interruption: not ended by it.
    const later = updates.dispatch("http://r0/v1", rollout.signal);
    expect(later.signal.aborted).toBe(false);
    let settled = false;
    void interrupted.then(() => {
      settled = true;
    });
    a.done();
    b.done();
    await sleep(0);
    expect(settled).toBe(false);
    c.done();
    expect(await interrupted).toBe(3);
    // The caller's abort reaches its own requests with its reason, on every replica.
    rollout.abort(new Error("cancelled"));
    expect(later.signal.reason).toEqual(new Error("cancelled"));
    expect(elsewhere.signal.reason).toEqual(new Error("cancelled"));
    later.done();
    elsewhere.done();
    expect(updates.inFlight).toBe(0);
    expect(await updates.interrupt("http://r0/v1")).toBe(0);
    // A request on an already aborted signal starts aborted.
    expect(updates.dispatch("http://r1/v1", rollout.signal).signal.aborted).toBe(true);
  });
});
