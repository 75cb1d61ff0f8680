// What a remote OpenEnv observation becomes: the prompt's text from a template over its fields,
// and the step's success by a configurable rule, for servers that send no `info` (most of
// OpenEnv's own envs: Reasoning Gym's observation is question, score, correct_answer).

import { afterEach, describe, expect, it } from "vitest";
import type { WebSocketServer } from "ws";
import { randomPolicy } from "../../src/llm/builtin.ts";
import type { Policy } from "../../src/llm/policy.ts";
import { runBatch } from "../../src/rollout/batch.ts";
import { defaultBatchRequest } from "../../src/rollout/request.ts";
import { fakeOpenEnvServer, remoteRegistry } from "../helpers/openenv-remote.ts";

const servers: WebSocketServer[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    for (const ws of server.clients) ws.terminate();
    await new Promise((resolve) => server.close(resolve));
  }
});

/**
 * A Reasoning Gym-like server: reset asks a question; a step answering "4" scores 1, any other
 * 0, and ends the episode. No `info` anywhere.
 */
async function quiz(): Promise<string> {
  const { server, base } = await fakeOpenEnvServer((raw) => {
    const message = JSON.parse(raw) as { type: string; data?: { answer?: string } };
    const observation =
      message.type === "reset"
        ? { question: "What is 2+2?", hint: { digits: 1 }, score: null, actions: null }
        : { question: null, hint: null, score: message.data?.answer === "4" ? 1 : 0, actions: null };
    const done = message.type !== "reset";
    const reward = done ? observation.score : null;
    return JSON.stringify({ type: "observation", data: { observation, reward, done } });
  });
  servers.push(server);
  return base;
}

async function playQuiz(envConfig: Record<string, unknown>, answer: string) {
  const registry = await remoteRegistry("Quiz", "CoordSokoban", {
    url: await quiz(),
    action_field: "answer",
    observation_field: "question",
    check_seed: false,
    ...envConfig,
  });
  const env = registry.tag("Quiz").open();
  try {
    const first = await env.reset(3);
    const step = await env.step(answer);
    return { first, step, after: env.render() };
  } finally {
    env.close?.();
  }
}

describe("success of a step on a server that sends no info", () => {
  it("auto (the default): done with a positive reward succeeds, a zero reward does not", async () => {
    const right = await playQuiz({}, "4");
    expect(right.step.info.success).toBe(true);
    // The question is null once answered (an Optional field sent as None): shown as nothing.
    expect(right.after).toBe("");
    expect((await playQuiz({}, "5")).step.info.success).toBe(false);
  });

  it("an observation field decides when the rule names one", async () => {
    expect((await playQuiz({ success: "observation.score" }, "4")).step.info.success).toBe(true);
    expect((await playQuiz({ success: "observation.score" }, "5")).step.info.success).toBe(false);
    expect((await playQuiz({ success: "info.solved" }, "4")).step.info.success).toBe(false);
  });

  it("a rule that is none of the allowed ones is refused, naming the key and what is allowed", async () => {
    await expect(playQuiz({ success: "score" }, "4")).rejects.toThrow(
      'success: "score" is not a success rule; allowed: auto, done_positive, info.NAME or observation.NAME',
    );
  });
});

describe("success and pass@k of a rollout on a server that sends no info", () => {
  it("count the episodes the server scored, by the default rule", async () => {
    const registry = await remoteRegistry(
      "Quiz",
      "CoordSokoban",
      { url: await quiz(), action_field: "answer", observation_field: "question", check_seed: false },
      { max_actions_per_traj: 1 },
    );
    // Episodes with an even env id answer right.
    const policy: Policy = {
      name: "quizzer",
      async generate(request) {
        const answer = request.episode.envId % 2 === 0 ? "4" : "5";
        return { text: `Adding.</think><answer>${answer}</answer>`, finishReason: "stop", attempts: 1 };
      },
    };
    const request = defaultBatchRequest("val", { tags: [{ tag: "Quiz", groups: 2 }], groupSize: 2, seed: 1 });
    const result = await runBatch(registry, request, policy);
    expect(result.failed).toBe(0);
    expect(result.episodes.map((e) => [e.env_id % 2 === 0, e.success])).toEqual(
      result.episodes.map((e) => [e.env_id % 2 === 0, e.env_id % 2 === 0]),
    );
    expect(result.metrics["val-env/Quiz/success"]).toBe(0.5);
    expect(result.metrics["val-env/Quiz/pass@2"]).toBe(1);
  });
});

describe("observation_template", () => {
  it("renders several fields into the prompt's text, nulls as nothing and objects as JSON", async () => {
    const { first, after } = await playQuiz(
      { observation_template: "Q: {question} {{hint: {hint.digits}}}\nscore={score}" },
      "4",
    );
    expect(first).toBe("Q: What is 2+2? {hint: 1}\nscore=");
    expect(after).toBe("Q:  {hint: }\nscore=1");
  });

  it("a field the observation lacks fails the episode naming it and the fields there are", async () => {
    await expect(playQuiz({ observation_template: "{prompt}" }, "4")).rejects.toThrow(
      /has no field "prompt" \(observation_template\); its fields: question, hint, score, actions/,
    );
  });

  it("a template without a placeholder, or with a broken one, is refused at config time", async () => {
    await expect(playQuiz({ observation_template: "just text" }, "4")).rejects.toThrow(
      'observation_template: "just text" names no field',
    );
    await expect(playQuiz({ observation_template: "{question" }, "4")).rejects.toThrow(
      /observation_template: "\{question" at character 0 is not a placeholder/,
    );
  });
});

describe("the random policy on a free-text remote env", () => {
  it("fails each episode naming the env and what is allowed, instead of answering nothing", async () => {
    const registry = await remoteRegistry("Quiz", "CoordSokoban", {
      url: await quiz(),
      action_field: "answer",
      observation_field: "question",
      check_seed: false,
    });
    const request = defaultBatchRequest("val", { tags: [{ tag: "Quiz", groups: 1 }], groupSize: 2, seed: 1 });
    const result = await runBatch(registry, request, randomPolicy());
    expect(result.episodes).toHaveLength(2);
    for (const e of result.episodes) {
      expect(e.turns).toHaveLength(0);
      expect(e.failure).toContain(
        "the random policy draws its actions from the env's action list, and Quiz takes free text (its observation lists no actions); allowed: a model (--llm URL --model M), or action names for the tag",
      );
    }
  });
});
