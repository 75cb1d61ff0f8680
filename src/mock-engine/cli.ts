// `rollgym mock-engine`: run the mock vLLM server until SIGINT/SIGTERM.
// Also runnable on its own: node src/mock-engine/cli.ts --port 8000 --ttft-ms 50
import { exitStatus, inContext } from "../errors/boundary.ts";
import { RollgymError } from "../errors/catalogue.ts";
import { CHAT_TEMPLATES, type ChatTemplateName } from "./chat-template.ts";
import { checkGenerationConfig } from "./generation-config.ts";
import {
  describeLatencyModel,
  LATENCY_PRESET_NAMES,
  LATENCY_PRESETS,
  type LatencyPresetName,
  parseResponseTokens,
} from "./latency.ts";
import { REASONING_PARSERS, type ReasoningParserName } from "./reasoning.ts";
import { DEFAULT_MODEL, type MockEngineOptions, startMockEngine } from "./server.ts";
import { TOKENIZER_NAMES, type TokenizerName } from "./tokenizer.ts";

/** A bad command line: the message names the flag and what it accepts. */
export class MockEngineUsageError extends RollgymError<"usage"> {
  constructor(message: string) {
    super("usage", { message });
    this.name = "MockEngineUsageError";
  }
}

type Apply = (options: MockEngineOptions, value: string, flag: string) => void;

function integer(min: number, max: number, set: (o: MockEngineOptions, v: number) => void): Apply {
  return (o, text, flag) => {
    if (!/^-?\d+$/.test(text) || Number(text) < min || Number(text) > max)
      throw new MockEngineUsageError(
        `mock-engine: ${flag}: ${JSON.stringify(text)} is not an integer from ${min} to ${max}`,
      );
    set(o, Number(text));
  };
}

function number(min: number, max: number, set: (o: MockEngineOptions, v: number) => void): Apply {
  return (o, text, flag) => {
    const v = Number(text);
    if (text.trim() === "" || !Number.isFinite(v) || v < min || v > max)
      throw new MockEngineUsageError(
        `mock-engine: ${flag}: ${JSON.stringify(text)} is not a number from ${min} to ${max}`,
      );
    set(o, v);
  };
}

function oneOf<T extends string>(allowed: readonly T[], set: (o: MockEngineOptions, v: T) => void): Apply {
  return (o, text, flag) => {
    if (!(allowed as readonly string[]).includes(text))
      throw new MockEngineUsageError(
        `mock-engine: ${flag}: ${JSON.stringify(text)} is not one of ${allowed.join(", ")}`,
      );
    set(o, text as T);
  };
}

const MS_MAX = 3_600_000;

const FLAGS: Record<string, { apply: Apply; help: string }> = {
  port: {
    apply: integer(0, 65535, (o, v) => (o.port = v)),
    help: "port on 127.0.0.1 (0: any free one; default 8000)",
  },
  model: {
    apply: (o, v, flag) => {
      const names = v.split(",").map((s) => s.trim());
      if (names.some((s) => s === ""))
        throw new MockEngineUsageError(
          `mock-engine: ${flag}: ${JSON.stringify(v)} is not a model name (or a comma-separated list)`,
        );
      o.model = names;
    },
    help: `served model name(s), comma-separated (default ${DEFAULT_MODEL})`,
  },
  "latency-model": {
    apply: oneOf<LatencyPresetName>(LATENCY_PRESET_NAMES, (o, v) => (o.latencyModel = v)),
    help:
      `where the latency flags below start from: none (default, instant), default (${describeLatencyModel(LATENCY_PRESETS.default)}), ` +
      `slow10x (TTFT 500 ms + 100 ms/token, the rest as default)`,
  },
  "ttft-ms": {
    apply: number(0, MS_MAX, (o, v) => (o.ttftMs = v)),
    help: "time to first token in ms (default: the latency model's)",
  },
  "tpot-ms": {
    apply: number(0, MS_MAX, (o, v) => (o.tpotMs = v)),
    help: "time per further token in ms while at most --batch-knee requests run (default: the model's)",
  },
  "batch-knee": {
    apply: integer(0, 2 ** 31, (o, v) => (o.batchKnee = v)),
    help: "running requests up to which --tpot-ms holds (default: the model's, 64)",
  },
  "slowdown-per-request": {
    apply: number(0, 100, (o, v) => (o.slowdownPerRequest = v)),
    help: "per-token time grows by this share per running request beyond the knee (default: the model's)",
  },
  "response-tokens": {
    apply: (o, text, flag) => {
      try {
        o.responseTokens = parseResponseTokens(text);
      } catch (error) {
        throw new MockEngineUsageError(
          `mock-engine: ${flag}: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    },
    help: 'response lengths: "lognormal:MEDIAN:P99" tokens, capped at max_tokens, or "natural" (the policy\'s short answers)',
  },
  jitter: {
    apply: number(0, 1, (o, v) => (o.jitter = v)),
    help: "relative latency jitter, 0..1 (default 0)",
  },
  "error-rate": { apply: number(0, 1, (o, v) => (o.errorRate = v)), help: "share of 500/503 answers, 0..1" },
  "rate-limit-rate": {
    apply: number(0, 1, (o, v) => (o.rateLimitRate = v)),
    help: "share of 429 answers, 0..1",
  },
  "drop-rate": {
    apply: number(0, 1, (o, v) => (o.dropRate = v)),
    help: "share of connections cut mid-request, 0..1",
  },
  "slow-rate": {
    apply: number(0, 1, (o, v) => (o.slowRate = v)),
    help: "share of requests given --slow-ms extra, 0..1",
  },
  "slow-ms": {
    apply: number(0, MS_MAX, (o, v) => (o.slowMs = v)),
    help: "extra first-token delay of slow requests",
  },
  "format-error-rate": {
    apply: number(0, 1, (o, v) => (o.formatErrorRate = v)),
    help: "share of malformed answers, 0..1",
  },
  "answer-actions": {
    apply: integer(1, 2, (o, v) => (o.answerActions = v === 1 ? 1 : 2)),
    help: "actions per answer, 1 or 2 (default: 1 or 2 at random)",
  },
  "max-concurrency": {
    apply: integer(1, 2 ** 31, (o, v) => (o.maxConcurrency = v)),
    help: "engine slots; more requests queue (default unlimited)",
  },
  "max-model-len": {
    apply: integer(1, 2 ** 31, (o, v) => (o.maxModelLen = v)),
    help: "context length in tokens (default 32768)",
  },
  seed: {
    apply: integer(0, 2 ** 32 - 1, (o, v) => (o.seed = v)),
    help: "seed for faults and unseeded answers (default 0)",
  },
  "generation-config": {
    apply: (o, text, flag) => {
      try {
        o.generationConfig = checkGenerationConfig(JSON.parse(text));
      } catch (error) {
        throw new MockEngineUsageError(
          `mock-engine: ${flag}: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    },
    help: `the model's generation_config.json as JSON, e.g. '{"repetition_penalty":1.05}'; fills what a request omits`,
  },
  "reasoning-parser": {
    apply: oneOf<ReasoningParserName>(REASONING_PARSERS, (o, v) => (o.reasoningParser = v)),
    help: `split non-streaming chat output into reasoning and content (${REASONING_PARSERS.join(", ")})`,
  },
  "abort-rate": {
    apply: number(0, 1, (o, v) => (o.abortRate = v)),
    help: 'share of 200 answers cut short with finish_reason "abort", 0..1',
  },
  "error-shape": {
    apply: oneOf(["nested", "flat"] as const, (o, v) => (o.errorShape = v)),
    help: 'error body: "nested" {"error": {...}} (default) or "flat" (vLLM < 0.10.1)',
  },
  "retry-after-s": {
    apply: (o, text, flag) => {
      if (text === "none") o.retryAfterS = null;
      else integer(0, 86_400, (opts, v) => (opts.retryAfterS = v))(o, text, flag);
    },
    help: 'Retry-After seconds on 429/503 answers, or "none" (default 1)',
  },
  tokenizer: {
    apply: oneOf<TokenizerName>(TOKENIZER_NAMES, (o, v) => (o.tokenizer = v)),
    help: `token ids: "toy" (default, fast) or "qwen3" (the real Qwen3 tokenizer, EOS <|im_end|> = 151645)`,
  },
  "chat-template": {
    apply: oneOf<ChatTemplateName>(CHAT_TEMPLATES, (o, v) => (o.chatTemplate = v)),
    help: '"chatml" (default, turns kept as sent) or "qwen3" (drops earlier turns\' <think> blocks)',
  },
  "pause-routes": {
    apply: oneOf(["on", "off"] as const, (o, v) => (o.pauseRoutes = v === "on")),
    help: '"on" (default) or "off": /pause, /resume, /is_paused and the version label routes answer 404, as on llama.cpp',
  },
};

export function mockEngineUsage(): string {
  const width = Math.max(...Object.keys(FLAGS).map((f) => f.length)) + 2;
  return [
    "usage: rollgym mock-engine [options]",
    "",
    "A stand-in for a vLLM server. Also serves POST /pause?mode=abort|wait|keep, POST /resume,",
    "GET /is_paused, POST /update_weight_version, GET /weight_info (vLLM's RL routes), and for",
    "tests POST /mock/load_weights {version} and GET /mock/generations.",
    "",
    ...Object.entries(FLAGS).map(([name, spec]) => `  --${name.padEnd(width)} ${spec.help}`),
  ].join("\n");
}

/** Flags to options; throws MockEngineUsageError naming the flag and the allowed range. */
export function parseMockEngineArgs(argv: readonly string[]): MockEngineOptions {
  const options: MockEngineOptions = { port: 8000 };
  const seen = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith("--"))
      throw new MockEngineUsageError(
        `mock-engine: unexpected argument ${JSON.stringify(arg)}; it takes only --options`,
      );
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const spec = FLAGS[name];
    if (!spec) {
      const allowed = Object.keys(FLAGS).map((f) => `--${f}`);
      throw new MockEngineUsageError(`mock-engine: unknown option --${name}; allowed: ${allowed.join(", ")}`);
    }
    let value: string | undefined;
    if (eq >= 0) {
      value = arg.slice(eq + 1);
    } else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith("--"))
        throw new MockEngineUsageError(`mock-engine: --${name} needs a value`);
      i++;
    }
    if (seen.has(name)) throw new MockEngineUsageError(`mock-engine: --${name} is given twice`);
    seen.add(name);
    spec.apply(options, value, `--${name}`);
  }
  const failureShare =
    (options.errorRate ?? 0) +
    (options.rateLimitRate ?? 0) +
    (options.dropRate ?? 0) +
    (options.abortRate ?? 0);
  if (failureShare > 1)
    throw new MockEngineUsageError(
      `mock-engine: --error-rate + --rate-limit-rate + --drop-rate + --abort-rate is ${failureShare}; it must be at most 1`,
    );
  return options;
}

export async function mockEngineCommand(argv: readonly string[]): Promise<void> {
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${mockEngineUsage()}\n`);
    return;
  }
  const options = parseMockEngineArgs(argv);
  let engine: Awaited<ReturnType<typeof startMockEngine>>;
  try {
    engine = await startMockEngine(options);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE" || code === "EACCES")
      throw new MockEngineUsageError(
        `mock-engine: --port ${options.port}: ${code === "EADDRINUSE" ? "already in use" : "not allowed"}`,
      );
    // An install without optional packages: the flag asks for what this install lacks.
    throw inContext(error, "tokenizer_missing", "mock-engine: --tokenizer qwen3");
  }
  const models = Array.isArray(options.model) ? options.model.join(", ") : DEFAULT_MODEL;
  process.stdout.write(
    `mock engine listening on ${engine.url} (model ${models}); latency: ${describeLatencyModel(engine.latency)}\n`,
  );

  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    const onSignal = (s: NodeJS.Signals): void => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      resolve(s);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
  await engine.close();
  const s = engine.stats();
  process.stderr.write(
    `mock engine stopped (${signal}): ${s.requests} requests, ${s.completed} completed, ` +
      `${s.promptTokens} prompt and ${s.generationTokens} generated tokens\n`,
  );
}

if (import.meta.main) {
  mockEngineCommand(process.argv.slice(2)).catch((error: unknown) => {
    const usage = exitStatus(error) === 2;
    process.stderr.write(
      `${usage ? "" : "mock-engine: "}${error instanceof Error ? error.message : String(error)}\n`,
    );
    process.exitCode = usage ? 2 : 1;
  });
}
