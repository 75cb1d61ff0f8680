// Starts a real llama.cpp `llama-server` (built by build.sh beside it) with a tiny
// random-weight model (Qwen3 by default, or Llama 3), for the integration tests and benches
// that need an OpenAI-compatible engine.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const LLAMA_SCRIPTS = fileURLToPath(new URL(".", import.meta.url));
/** The models build.sh writes, each with its real tokenizer and chat template; served under `tiny-<model>`. */
export type TinyModel = "qwen3" | "llama3";

/** Grammar for the continuation of a `<think>` assistant prefill: `…</think><answer>A || B</answer>`. */
export const RAGEN_GRAMMAR_FILE = join(LLAMA_SCRIPTS, "ragen-answer.gbnf");
/** Grammar for a whole response without prefill: `<think>…</think><answer>A || B</answer>`. */
export const RAGEN_GRAMMAR_FULL_FILE = join(LLAMA_SCRIPTS, "ragen-answer-full.gbnf");

export function ragenGrammar(variant: "after-think" | "full" = "after-think"): string {
  return readFileSync(variant === "full" ? RAGEN_GRAMMAR_FULL_FILE : RAGEN_GRAMMAR_FILE, "utf8");
}

/**
 * The cache directory build.sh fills: `${ROLLGYM_CACHE:-$HOME/.cache/rollgym}/llama-<version>-<key>`,
 * key = first 12 hex of sha256(versions.env ++ make_tiny_gguf.py). Must match build.sh.
 */
export function llamaDir(): string {
  const versions = readFileSync(join(LLAMA_SCRIPTS, "versions.env"));
  const writer = readFileSync(join(LLAMA_SCRIPTS, "make_tiny_gguf.py"));
  const version = /^NODE_LLAMA_CPP_VERSION=(\S+)$/m.exec(versions.toString("utf8"))?.[1];
  if (!version) throw new Error(`no NODE_LLAMA_CPP_VERSION in ${join(LLAMA_SCRIPTS, "versions.env")}`);
  const key = createHash("sha256").update(versions).update(writer).digest("hex").slice(0, 12);
  const root = process.env["ROLLGYM_CACHE"] || join(homedir(), ".cache", "rollgym");
  return join(root, `llama-${version}-${key}`);
}

export interface LlamaServerOptions {
  /** Which tiny model to serve, default "qwen3". */
  model?: TinyModel;
  /** Parallel slots (`-np`), default 4. */
  parallel?: number;
  /** Total context (`-c`, divided across slots), default 8192. */
  ctx?: number;
  /** Generation threads (`-t`), default 1 (2 spins OpenMP against the client on 2 cores). */
  threads?: number;
  /** Extra command-line flags, appended last. */
  extraArgs?: readonly string[];
  /** How long to wait for `/health` to answer 200, default 60 s. */
  timeoutMs?: number;
}

export interface LlamaServer {
  /** e.g. `http://127.0.0.1:40123` (append `/v1/...`). */
  baseUrl: string;
  /** The served model name (`-a`). */
  model: string;
  /** The full command line, for messages. */
  command: readonly string[];
  /** The last lines the server printed (stdout and stderr), for debugging failures. */
  log(): string;
  stop(): Promise<void>;
}

const LOG_LINES = 300;

export async function startLlamaServer(opts: LlamaServerOptions = {}): Promise<LlamaServer> {
  const dir = llamaDir();
  const bin = join(dir, "bin", "llama-server");
  const model = `tiny-${opts.model ?? "qwen3"}`;
  const gguf = join(dir, `${model}.gguf`);
  if (!existsSync(join(dir, "COMPLETE")) || !existsSync(bin) || !existsSync(gguf)) {
    throw new Error(
      `llama-server build not found in ${dir}: run scripts/llama/build.sh first (about 8 min on 2 cores; ` +
        "it needs npm, git, cmake, a C++ compiler and python3 with numpy)",
    );
  }
  // --port 0: the server binds a free port itself and logs "listening on http://127.0.0.1:<port>"
  // once the model is loaded, so there is no pick-then-bind race.
  const args = [
    "-m",
    gguf,
    "-a",
    model,
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "-c",
    String(opts.ctx ?? 8192),
    "-np",
    String(opts.parallel ?? 4),
    "-t",
    String(opts.threads ?? 1),
    "--reasoning-format",
    "none",
    "--jinja",
    "--no-webui",
    ...(opts.extraArgs ?? []),
  ];
  // LLAMA_ARG_* variables would silently override flags; keep the child's config explicit.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LLAMA_ARG_")));
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env });
  const command = [bin, ...args];

  const lines: string[] = [];
  const log = () => lines.join("\n");
  let port: number | undefined;
  let onPort: (() => void) | undefined;
  const collect = (stream: NodeJS.ReadableStream) => {
    let partial = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (lines.length > LOG_LINES) lines.shift();
        const m = /listening on https?:\/\/127\.0\.0\.1:(\d+)/.exec(line);
        if (m && port === undefined) {
          port = Number(m[1]);
          onPort?.();
        }
      }
    });
  };
  collect(child.stdout!);
  collect(child.stderr!);

  let exited = false;
  const exitedPromise = new Promise<void>((resolve) =>
    child.once("exit", () => {
      exited = true;
      resolve();
    }),
  );
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

  const stop = async () => {
    process.removeListener("exit", killOnExit);
    if (exited) return;
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    await exitedPromise;
    clearTimeout(timer);
  };

  try {
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no "listening on" line within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      onPort = done;
      if (port !== undefined) done();
      child.once("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
      exitedPromise.then(() => {
        clearTimeout(timer);
        reject(new Error(`llama-server exited early (code ${child.exitCode}, signal ${child.signalCode})`));
      });
    });
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitHealthy(baseUrl, deadline, () => exited);
    return { baseUrl, model, command, log, stop };
  } catch (e) {
    await stop();
    throw new Error(
      `llama-server did not start: ${(e as Error).message}\ncommand: ${command.join(" ")}\n${log()}`,
    );
  }
}

async function waitHealthy(baseUrl: string, deadline: number, exited: () => boolean): Promise<void> {
  let last = "";
  while (Date.now() < deadline) {
    if (exited()) throw new Error("llama-server exited while waiting for /health");
    try {
      const res = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2_000) });
      if (res.status === 200) return;
      last = `${res.status} ${await res.text()}`;
    } catch (e) {
      last = String(e);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`/health not 200 before the deadline (last: ${last})`);
}

/** For tests that only need to know whether the build exists. */
export function llamaBuilt(): boolean {
  return existsSync(join(llamaDir(), "COMPLETE"));
}
