// Batches of groups played with the built-in policies: layout, seeds, RAGEN's bookkeeping,
// metrics, the filter, determinism and failure reporting.
import { describe, expect, it } from "vitest";
import { createRegistry } from "../../envs/catalog.ts";
import { oraclePolicy, randomPolicy } from "../../src/llm/builtin.ts";
import { type Policy, TEMPLATE_TOKENS_PER_MESSAGE } from "../../src/llm/policy.ts";
import {
  type BatchRequest,
  extendedPromptBound,
  groupEpisodes,
  runBatch,
  trainBatchSeed,
} from "../../src/rollout/batch.ts";
import { DEFAULT_FILTER } from "../../src/rollout/filter.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";

const registry = createRegistry();

function request(overrides: Partial<BatchRequest> = {}): BatchRequest {
  return defaultBatchRequest("val", { tags: [{ tag: "CoordSokoban", groups: 64 }], ...overrides });
}

describe("runBatch", () => {
  it("lays out tags, groups and seeds as RAGEN: env ids contiguous, group = env // size, seed + group", async () => {
    const batch = await runBatch(
      registry,
      request({
        mode: "train",
        tags: [
          { tag: "SimpleSokoban", groups: 2 },
          { tag: "FrozenLake", groups: 1 },
        ],
        groupSize: 3,
        seed: 10000,
      }),
      oraclePolicy(),
    );
    expect(batch.episodes.map((e) => [e.env_id, e.group_id, e.tag, e.seed])).toEqual([
      [0, 0, "SimpleSokoban", 10000],
      [1, 0, "SimpleSokoban", 10000],
      [2, 0, "SimpleSokoban", 10000],
      [3, 1, "SimpleSokoban", 10001],
      [4, 1, "SimpleSokoban", 10001],
      [5, 1, "SimpleSokoban", 10001],
      [6, 2, "FrozenLake", 10002],
      [7, 2, "FrozenLake", 10002],
      [8, 2, "FrozenLake", 10002],
    ]);
    expect(trainBatchSeed(10000, 0, 8)).toBe(10000);
    expect(trainBatchSeed(10000, 1, 8)).toBe(10008);
    expect(Object.keys(batch.metrics)).toContain("train/SimpleSokoban/pass@3");
  });

  it("the oracle solves every validation puzzle whose shortest solution fits the budget", async () => {
    const batch = await runBatch(
      registry,
      request({ tags: [{ tag: "CoordSokoban", groups: 512 }] }),
      oraclePolicy(),
    );
    let solvable = 0;
    for (let g = 0; g < 512; g++) {
      const tag = registry.tag("CoordSokoban");
      const env = tag.make();
      env.reset(123 + g);
      const plan = tag.solve(env)?.actions;
      if (plan && plan.length <= 10) solvable++;
    }
    const solved = batch.episodes.filter((e) => e.success).length;
    expect(solved).toBe(solvable);
    expect(batch.metrics["val-env/CoordSokoban/success"]).toBe(solvable / 512);
    expect(batch.metrics["val-env/CoordSokoban/pass@1"]).toBe(solvable / 512);
    expect(batch.failed).toBe(0);
  });

  it("success falls as the oracle's noise grows, and the random policy does worse still", async () => {
    const rates: number[] = [];
    for (const noise of [0, 0.5, 1]) {
      const batch = await runBatch(
        registry,
        request({ tags: [{ tag: "SimpleSokoban", groups: 200 }] }),
        oraclePolicy({ noise }),
      );
      rates.push(batch.metrics["val-env/SimpleSokoban/success"]);
    }
    expect(rates[0]).toBeGreaterThan(rates[1]);
    expect(rates[1]).toBeGreaterThan(rates[2]);
    const random = await runBatch(
      registry,
      request({ tags: [{ tag: "SimpleSokoban", groups: 200 }] }),
      randomPolicy(),
    );
    expect(random.metrics["val-env/SimpleSokoban/success"]).toBeLessThan(rates[0]);
  });

  it("charges one format penalty per malformed turn and warns in the next prompt", async () => {
    const seen: string[] = [];
    const malformedOnce: Policy = {
      name: "scripted",
      async generate(req) {
        seen.push(req.messages.at(-1)!.content);
        return req.episode.turn === 0
          ? { text: "hmm</think><answer>Jump || Up</answer>", finishReason: "stop" }
          : req.episode.turn === 1
            ? { text: "no tags at all", finishReason: "length" }
            : { text: "ok</think><answer>Left</answer>", finishReason: "stop" };
      },
    };
    const batch = await runBatch(
      registry,
      request({
        tags: [{ tag: "SimpleSokoban", groups: 1 }],
        seed: 10000,
        episode: { ...request().episode, max_turn: 3 },
      }),
      malformedOnce,
    );
    const [episode] = batch.episodes;
    expect(episode.turns.map((t) => t.format_penalty)).toEqual([true, true, false]);
    expect(episode.penalty).toBeCloseTo(-0.2, 12);
    expect(episode.turns.map((t) => t.actions)).toEqual([["Up"], [], ["Left"]]);
    expect(episode.turns.map((t) => t.reward_text)).toEqual(["-0.1", "0", "-0.1"]);
    expect(episode.turns[1].info.manager_invalid_action).toBe(true);
    expect(episode.turns[2].warned).toBe(true);
    expect(seen[1]).toMatch(/^Reward:\n-0\.1\n\nTurn 2:\nState:\n/);
    expect(seen[2]).toContain(
      "No valid action provided previously. Environment state remains the same. Please try again.\n",
    );
    expect(episode.score).toBe(Math.fround(Math.fround(-0.2) + Math.fround(-0.2)));
    expect(episode.metrics["SimpleSokoban/manager_invalid_action"]).toBeCloseTo(1 / 3, 12);
  });

  it("reports an episode whose policy fails as failed, never as a zero, and keeps the others", async () => {
    const flaky: Policy = {
      name: "flaky",
      async generate(req) {
        if (req.episode.envId === 1 && req.episode.turn === 0)
          throw new Error("HTTP 500: boom (gave up after 5 attempts)");
        return oraclePolicy().generate(req);
      },
    };
    const batch = await runBatch(registry, request({ tags: [{ tag: "SimpleSokoban", groups: 4 }] }), flaky);
    expect(batch.failed).toBe(1);
    expect(batch.episodes[1].failure).toBe("turn 1: HTTP 500: boom (gave up after 5 attempts)");
    expect(batch.episodes.filter((e) => e.failure === null)).toHaveLength(3);
    expect(batch.metrics["rollgym/failed_episodes"]).toBe(1);
    expect(batch.groups[1].failed).toBe(true);
  });

  it("is deterministic for a seed and a deterministic policy", async () => {
    const a = await runBatch(
      registry,
      request({ tags: [{ tag: "FrozenLake", groups: 32 }] }),
      oraclePolicy({ noise: 0.3 }),
    );
    const b = await runBatch(
      registry,
      request({ tags: [{ tag: "FrozenLake", groups: 32 }] }),
      oraclePolicy({ noise: 0.3 }),
    );
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
  });

  it("applies the group filter to train batches with RAGEN's metric names", async () => {
    const batch = await runBatch(
      registry,
      request({
        mode: "train",
        tags: [{ tag: "SimpleSokoban", groups: 8 }],
        groupSize: 4,
        seed: 10000,
        filter: { ...DEFAULT_FILTER, value: 0.5 },
      }),
      oraclePolicy({ noise: 0.5 }),
    );
    const kept = batch.groups.filter((g) => g.kept);
    expect(kept.length).toBeGreaterThan(0);
    expect(kept.length).toBeLessThan(8);
    expect(batch.metrics["rollout/filter_kept_count"]).toBe(kept.length);
    expect(batch.metrics["rollout/filter_kept_ratio"]).toBe(kept.length / 8);
    // Linear top-p keeps the groups with the largest reward std first.
    const minKept = Math.min(...kept.map((g) => g.score!));
    const maxDropped = Math.max(...batch.groups.filter((g) => !g.kept).map((g) => g.score!));
    expect(minKept).toBeGreaterThanOrEqual(maxDropped);
  });
});

describe("context windows", () => {
  it("full mode replays every turn; limited_multi_turn and single_turn show a window", async () => {
    const prompts: Record<string, string[][]> = { full: [], limited_multi_turn: [], single_turn: [] };
    for (const mode of ["full", "limited_multi_turn", "single_turn"] as const) {
      const policy: Policy = {
        name: "wander",
        async generate(req) {
          prompts[mode].push(req.messages.map((m) => `${m.role}:${m.content}`));
          return { text: "x</think><answer>Right</answer>", finishReason: "stop" };
        },
      };
      await runBatch(
        registry,
        request({
          tags: [{ tag: "SimpleSokoban", groups: 1 }],
          seed: 10001,
          episode: { ...request().episode, max_turn: 3, context_window_mode: mode, max_context_window: 2 },
        }),
        policy,
      );
    }
    expect(prompts.full[2].map((m) => m.split(":")[0])).toEqual([
      "system",
      "user",
      "assistant",
      "user",
      "assistant",
      "user",
    ]);
    expect(prompts.full[2][1]).toContain("\nTurn 1:\n");
    expect(prompts.limited_multi_turn[2].map((m) => m.split(":")[0])).toEqual([
      "system",
      "user",
      "assistant",
      "user",
    ]);
    expect(prompts.limited_multi_turn[2][1]).toContain("\nTurn 2:\n");
    expect(prompts.limited_multi_turn[2][1]).not.toContain("Turn 1:");
    expect(prompts.single_turn[0][1]).toMatch(/^user:\(Turn 1\):\nState:\n/);
    expect(prompts.single_turn[2]).toHaveLength(2);
    expect(prompts.single_turn[2][1]).toMatch(
      /^user:Summary: 2 step\(s\) completed so far\. Showing the last 1 turn\(s\) with state\/action\/reward details\. Recent turns:\n---\nTurn 2 State:\n/,
    );
    expect(prompts.single_turn[2][1]).toContain(
      "Turn 2 Action: <think>x</think><answer>Right</answer>\nTurn 2 Reward: -0.1\n---\n\nCurrent Turn (Turn 3):\n",
    );
  });
});

describe("the last prompt message (token mode appends it alone)", () => {
  it("is promptMessages()'s last message after every turn, in every window mode, with warnings and rewards", () => {
    const answers = [
      "x</think><answer>Right</answer>",
      "no answer at all",
      "x</think><answer>Up || Left</answer>",
    ];
    for (const mode of ["full", "limited_multi_turn", "single_turn"] as const)
      for (const window of [0, 1, 2]) {
        const req = request({
          seed: 10001,
          episode: {
            ...request().episode,
            max_turn: 4,
            context_window_mode: mode,
            max_context_window: window,
          },
        });
        const [episode] = groupEpisodes(registry, req, 0, "SimpleSokoban");
        let compared = 0;
        for (let turn = 0; episode.active && turn < 4; turn++) {
          expect(episode.lastPromptMessage(), `${mode} ${window} turn ${turn}`).toEqual(
            episode.promptMessages().at(-1),
          );
          compared++;
          const applied = episode.applyResponse(`<think>${answers[turn % answers.length]}`, "stop");
          expect(applied).not.toBeInstanceOf(Promise);
        }
        expect(compared).toBeGreaterThan(2);
      }
  });
});

describe("binary reward", () => {
  it("scores 1 for a solved episode and 0 otherwise, penalties still applied", async () => {
    const batch = await runBatch(
      registry,
      request({ tags: [{ tag: "SimpleSokoban", groups: 40 }], binaryReward: true }),
      oraclePolicy({ noise: 0.5, malformed: 0.2 }),
    );
    for (const e of batch.episodes) {
      expect(e.score).toBe(Math.fround(Math.fround(e.success ? 1 : 0) + Math.fround(e.penalty)));
    }
    expect(batch.episodes.some((e) => e.success)).toBe(true);
    expect(batch.episodes.some((e) => !e.success)).toBe(true);
  });
});

describe("the prompt bound that saves a count", () => {
  const system = { role: "system" as const, content: "You are a helpful assistant." };
  const first = { role: "user" as const, content: "Turn 1:\nState:\n#P_#\n" };
  const known = { messages: [system, first], tokens: 40 };

  it("adds the UTF-8 bytes and the template allowance of every appended message", () => {
    const appended = [
      { role: "assistant" as const, content: "<answer>Right</answer>" },
      { role: "user" as const, content: "Reward:\n1\n… ✓" },
    ];
    const bytes = 22 + Buffer.byteLength("Reward:\n1\n… ✓", "utf8");
    expect(Buffer.byteLength("Reward:\n1\n… ✓", "utf8")).toBe(17);
    // Copies of the same text count as unchanged.
    const next = [{ ...system }, { ...first }, ...appended];
    expect(extendedPromptBound(known, next)).toBe(40 + bytes + 2 * TEMPLATE_TOKENS_PER_MESSAGE);
  });

  it("gives no bound unless the new prompt extends the known one unchanged", () => {
    const reply = { role: "assistant" as const, content: "<answer>Up</answer>" };
    // Same messages (a retry): nothing appended, so the known count is not reused as a bound.
    expect(extendedPromptBound(known, [system, first])).toBeNull();
    // An earlier message changed (a window slid, turns were dropped).
    expect(extendedPromptBound(known, [system, { ...first, content: "Turn 2:" }, reply])).toBeNull();
    expect(extendedPromptBound(known, [{ ...system, role: "user" }, first, reply])).toBeNull();
    expect(extendedPromptBound(known, [first, reply, first])).toBeNull();
  });
});
