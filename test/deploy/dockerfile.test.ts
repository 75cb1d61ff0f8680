// The Dockerfile, checked without Docker (none on the machine this was written on, so the image
// has never been built here): what it copies exists and is not ignored, the build stage copies
// every folder the package build compiles, the runtime stage holds the published package's
// folders, the user is not root, and its ENV and CMD are what `rollgym serve --print-runtime`
// prints for the image's paths, so they cannot drift from the tuned runtime.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { parseArgs } from "../../src/cli/args.ts";
import { runtimeLines } from "../../src/cli/runtime.ts";
import { DEFAULT_PORT, SERVE_FLAGS } from "../../src/cli/serve.ts";
import { ROOT } from "../helpers/cli.ts";
import { IMAGE } from "./image.ts";

interface Instruction {
  stage: number;
  keyword: string;
  args: string;
}

/** The Dockerfile's instructions (continuations joined, comments dropped), each with its stage. */
function instructions(): Instruction[] {
  const text = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const lines = text
    .replace(/\\\n/g, " ")
    .split("\n")
    .filter((line) => line.trim() && !line.trim().startsWith("#"));
  let stage = -1;
  return lines.map((line) => {
    const [, keyword, args] = /^\s*(\w+)\s+(.*)$/.exec(line)!;
    if (keyword.toUpperCase() === "FROM") stage++;
    return { stage, keyword: keyword.toUpperCase(), args: args.trim() };
  });
}

/** COPY instructions as sources and destination (not those copying from another stage). */
function copies(stage?: number): { sources: string[]; destination: string; from: boolean }[] {
  return instructions()
    .filter((i) => i.keyword === "COPY" && (stage === undefined || i.stage === stage))
    .map((i) => {
      const words = i.args.split(/\s+/);
      const from = words[0].startsWith("--from=");
      const paths = words.filter((w) => !w.startsWith("--"));
      return { sources: paths.slice(0, -1), destination: paths.at(-1)!, from };
    });
}

const finalStage = () => Math.max(...instructions().map((i) => i.stage));
const last = (keyword: string) => instructions().findLast((i) => i.keyword === keyword)!;

describe("the Dockerfile", () => {
  it("copies only paths that exist and that .dockerignore keeps in the build context", () => {
    const ignored = readFileSync(join(ROOT, ".dockerignore"), "utf8")
      .split("\n")
      .filter((line) => line.trim() && !line.startsWith("#"));
    const sources = copies()
      .filter((c) => !c.from)
      .flatMap((c) => c.sources);
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      expect(existsSync(join(ROOT, source)), source).toBe(true);
      expect(ignored, source).not.toContain(source.split("/")[0]);
    }
  });

  it("builds with every folder the package build compiles, and the build's script and configs", () => {
    const config = ts.getParsedCommandLineOfConfigFile(
      join(ROOT, "tsconfig.build.json"),
      {},
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
        },
      },
    )!;
    const program = ts.createProgram(config.fileNames, { ...config.options, noEmit: true });
    const compiled = new Set(
      program
        .getSourceFiles()
        .map((f) => relative(ROOT, f.fileName))
        .filter((f) => !f.startsWith("..") && !f.includes("node_modules"))
        .map((f) => f.split("/")[0]),
    );
    expect(compiled).toContain("src");
    const built = copies(0).flatMap((c) => c.sources);
    for (const folder of compiled) expect(built, folder).toContain(folder);
    expect(built).toEqual(
      expect.arrayContaining(["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json"]),
    );
    expect(built).toContain("scripts/build-dist.ts");
    expect(
      instructions()
        .filter((i) => i.stage === 0 && i.keyword === "RUN")
        .at(-1)!.args,
    ).toBe("node scripts/build-dist.ts");
  });

  it("ships the published package's folders (package.json files) with production dependencies only", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
    const shipped = copies(finalStage()).map((c) => c.destination.replace(/\/$/, ""));
    for (const folder of pkg.files as string[]) expect(shipped, folder).toContain(folder.replace(/\/$/, ""));
    const runs = instructions().filter((i) => i.stage === finalStage() && i.keyword === "RUN");
    expect(runs.some((r) => r.args.startsWith("npm ci --omit=dev"))).toBe(true);
    // Node as the package's engines field asks for, and the script where the CMD runs it.
    const major = /^>=(\d+)/.exec(pkg.engines.node)![1];
    for (const from of instructions().filter((i) => i.keyword === "FROM"))
      expect(from.args).toMatch(new RegExp(`^node:${major}-`));
    expect(join(last("WORKDIR").args, "bin", "rollgym.js")).toBe(IMAGE.script);
    const bin = copies(finalStage()).find((c) => c.sources.includes("bin"))!;
    expect(dirname(IMAGE.script)).toBe(join(last("WORKDIR").args, bin.destination));
  });

  it("runs as a user that is not root and exposes serve's default port", () => {
    const user = last("USER").args;
    expect(["root", "0"]).not.toContain(user.split(":")[0]);
    expect(Number(last("EXPOSE").args)).toBe(DEFAULT_PORT);
  });

  it("sets the ENV and CMD `rollgym serve --print-runtime` prints for its serve options", () => {
    const cmd: string[] = JSON.parse(last("CMD").args);
    const serveArgs = cmd.slice(cmd.indexOf("serve") + 1);
    expect(parseArgs("serve", serveArgs, SERVE_FLAGS).positionals).toEqual([]);
    // As printed in the image (its node, its install, Debian's jemalloc).
    const printed = runtimeLines(serveArgs, IMAGE.jemalloc, IMAGE.node, IMAGE.script).split("\n");
    const env = instructions().filter((i) => i.keyword === "ENV");
    expect(env.map((i) => `ENV ${i.args}`)).toEqual(printed.filter((line) => line.startsWith("ENV ")));
    expect(`CMD ${last("CMD").args}`).toBe(printed.find((line) => line.startsWith("CMD ")));
    // And as the command prints it now on this machine: the same flags around its own paths.
    const here = execFileSync(
      process.execPath,
      [join(ROOT, "bin", "rollgym.js"), "serve", "--print-runtime", ...serveArgs],
      { encoding: "utf8" },
    );
    const hereCmd: string[] = JSON.parse(
      here
        .split("\n")
        .find((l) => l.startsWith("CMD "))!
        .slice(4),
    );
    const scriptAt = hereCmd.indexOf(realpathSync(join(ROOT, "bin", "rollgym.js")));
    expect(scriptAt).toBeGreaterThan(0);
    expect([IMAGE.node, ...hereCmd.slice(1, scriptAt), IMAGE.script, ...hereCmd.slice(scriptAt + 1)]).toEqual(
      cmd,
    );
  });
});
