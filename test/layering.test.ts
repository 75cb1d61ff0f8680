// The layering of DESIGN.md ("Layout" and "Dependencies point one way"), checked on the import
// lines of every module under src/, envs/ and protocol/: an import between folders the table
// below does not allow fails, and so does any import cycle between files. Type-only imports
// count: a type is a dependency too, and a cycle of types is a cycle of design. The Python side
// lives in python/ (one distribution of three packages that import none of each other, so a
// trainer's client never pulls the engine), and protocol/ holds no Python but the stubs that
// name the new place.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SCANNED = ["src", "envs", "protocol"];

/** Every layer under the command (and the package API). */
const BELOW_CLI = [
  "src/bench",
  "src/mock-engine",
  "src/server",
  "src/rollout",
  "src/llm",
  "src/record",
  "src/config",
  "src/remote-envs",
  "src/errors",
  "src/concurrency",
  "src/client",
  "envs",
  "protocol",
];

/**
 * Which layers each layer may import (besides itself). DESIGN.md's table, with these
 * clarifications made where the code is right and the table was silent or too strict:
 * - `src/config` imports `envs` (registry.ts adds the config's plugins and custom envs to an env
 *   registry; which env types exist, the remote ones included, is composed above it, in
 *   src/cli/build-registry.ts) and `protocol` (config keys take their schemas from
 *   protocol/settings.ts, beside the wire schemas, so each setting is written once).
 * - `src/bench` (the load generator) imports `src/mock-engine` (it starts the mock); they share
 *   one row in DESIGN.md, but the mock imports neither the bench nor `src/server` ("only cli and
 *   bench import server").
 * - `src/index.ts` is the package's public API and re-exports from every layer, `cli`'s `run`
 *   included; nothing imports it.
 * - `src/errors` (the error catalogue: a code per error with its exit status, frame code, HTTP
 *   status and close code) imports only `protocol`, and every layer of src/ may use it.
 * - `src/concurrency` (the one wait queue behind every limit that parks callers) imports nothing,
 *   and every layer of src/ may use it.
 * - `src/client` (the TypeScript protocol client) imports only `protocol` and the wait queue: the
 *   bench's trainer and the page's watch view (under `src/server`) speak the protocol through it.
 */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  envs: [],
  protocol: [],
  "src/concurrency": [],
  "src/errors": ["protocol"],
  "src/client": ["protocol", "src/concurrency"],
  "src/remote-envs": ["envs", "protocol", "src/concurrency"],
  "src/config": ["envs", "protocol", "src/errors", "src/concurrency"],
  "src/record": ["protocol", "src/errors", "src/concurrency"],
  "src/llm": ["envs", "protocol", "src/errors", "src/concurrency"],
  "src/rollout": ["envs", "protocol", "src/llm", "src/record", "src/config", "src/errors", "src/concurrency"],
  "src/server": [
    "src/rollout",
    "src/llm",
    "src/record",
    "src/config",
    "envs",
    "protocol",
    "src/errors",
    "src/concurrency",
    "src/client",
  ],
  "src/mock-engine": ["src/rollout", "src/llm", "envs", "protocol", "src/errors", "src/concurrency"],
  "src/bench": [
    "src/mock-engine",
    "src/server",
    "src/rollout",
    "src/llm",
    "envs",
    "protocol",
    "src/errors",
    "src/concurrency",
    "src/client",
  ],
  // The command, and the package's public API above it, may import every layer below them.
  "src/cli": BELOW_CLI,
  "src/index.ts": ["src/cli", ...BELOW_CLI],
};

/** Repository-relative paths (with "/") → the repository-relative paths they import. */
type ImportGraph = ReadonlyMap<string, readonly string[]>;

/** The layer a repository-relative path belongs to: a top-level folder, a folder of src/, or src/index.ts. */
function layerOf(path: string): string {
  const parts = path.split("/");
  if (parts[0] !== "src") return parts[0];
  return parts.length === 2 ? path : `src/${parts[1]}`;
}

/** The files under dir (repository-relative), leaving out installs and build output. */
function filesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (!entry.isDirectory()) return [path];
    const generated =
      ["node_modules", "__pycache__", "build"].includes(entry.name) || entry.name.endsWith(".egg-info");
    return generated ? [] : filesUnder(path);
  });
}

function modules(dir: string): string[] {
  return filesUnder(dir).filter((path) => path.endsWith(".ts") && !path.endsWith(".d.ts"));
}

/** The Python packages of python/: each one a folder with an __init__.py. */
const PY_PACKAGES = ["rollgym_client", "rollgym_envs", "rollgym_engine"];

/** protocol/python/ kept only these: one stub per package that raises ImportError naming python/. */
const PY_STUBS = PY_PACKAGES.map((pkg) => `protocol/python/${pkg}/__init__.py`);

/** The rollgym packages a Python file imports by absolute name (`import X`, `from X[.y] import`). */
function pythonImports(source: string): string[] {
  const names = [...source.matchAll(/^[ \t]*(?:from|import)[ \t]+(rollgym_\w+)/gm)].map((m) => m[1]);
  return [...new Set(names)];
}

/** Every import of one python/ package from another, as "file -> package". */
function crossPackageImports(files: ReadonlyMap<string, string>): string[] {
  const found: string[] = [];
  for (const [file, source] of files) {
    const pkg = file.split("/")[1];
    if (!PY_PACKAGES.includes(pkg)) continue;
    for (const imported of pythonImports(source)) if (imported !== pkg) found.push(`${file} -> ${imported}`);
  }
  return found;
}

/**
 * The relative imports of every module: `import`, `import type`, `export … from` and
 * `import("…")` with a literal specifier, read by TypeScript's own pre-processor, which skips
 * comments and strings. Package imports (typebox, ws, node:…) are outside the layering.
 */
function readImportGraph(dirs: readonly string[] = SCANNED): ImportGraph {
  const graph = new Map<string, string[]>();
  for (const file of dirs.flatMap(modules)) {
    const { importedFiles } = ts.preProcessFile(readFileSync(join(ROOT, file), "utf8"), true, true);
    const targets = importedFiles
      .map((imported) => imported.fileName)
      .filter((specifier) => specifier.startsWith("."))
      .map((specifier) => posix.normalize(posix.join(posix.dirname(file), specifier)));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Every import between layers that ALLOWED does not list, as "from -> to (layer -> layer)". */
function forbiddenImports(graph: ImportGraph): string[] {
  const found: string[] = [];
  for (const [from, targets] of graph) {
    const source = layerOf(from);
    for (const to of targets) {
      const target = layerOf(to);
      if (target === source) continue;
      const allowed = ALLOWED[source];
      if (allowed === undefined)
        found.push(`${from}: layer ${source} is not in the table (add it to ALLOWED)`);
      else if (!allowed.includes(target)) found.push(`${from} -> ${to} (${source} may not import ${target})`);
    }
  }
  return found;
}

/** Folders whose code must stand without the tests: the product, the benches and the scripts. */
const NOT_TESTS = [...SCANNED, "bench", "scripts"];

/** Every import of a module under test/ from outside it, as "from -> to". */
function testImports(graph: ImportGraph): string[] {
  const found: string[] = [];
  for (const [from, targets] of graph)
    for (const to of targets) if (to.startsWith("test/")) found.push(`${from} -> ${to}`);
  return found;
}

/** The file names used twice in one layer, as "layer: name (path, path)"; index.ts aside. */
function sharedNames(paths: readonly string[]): string[] {
  const byName = new Map<string, string[]>();
  for (const path of paths) {
    const name = posix.basename(path);
    if (name === "index.ts") continue;
    const key = `${layerOf(path)}: ${name}`;
    byName.set(key, [...(byName.get(key) ?? []), path]);
  }
  return [...byName]
    .filter(([, found]) => found.length > 1)
    .map(([key, found]) => `${key} (${found.join(", ")})`);
}

/**
 * The import cycles between files: each strongly connected component of more than one file (or
 * a file importing itself), written as one cycle through it, e.g. "a.ts -> b.ts -> a.ts".
 */
function importCycles(graph: ImportGraph): string[] {
  // Tarjan's algorithm, iterative so a deep import chain cannot overflow the stack.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  let next = 0;
  for (const root of graph.keys()) {
    if (index.has(root)) continue;
    const work: { node: string; edge: number }[] = [{ node: root, edge: 0 }];
    index.set(root, next);
    low.set(root, next++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const targets = graph.get(frame.node) ?? [];
      if (frame.edge < targets.length) {
        const to = targets[frame.edge++];
        if (!graph.has(to)) continue;
        if (!index.has(to)) {
          index.set(to, next);
          low.set(to, next++);
          stack.push(to);
          onStack.add(to);
          work.push({ node: to, edge: 0 });
        } else if (onStack.has(to)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(to)!));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1].node;
        low.set(parent, Math.min(low.get(parent)!, low.get(frame.node)!));
      }
      if (low.get(frame.node) === index.get(frame.node)) {
        const component: string[] = [];
        let member: string;
        do {
          member = stack.pop()!;
          onStack.delete(member);
          component.push(member);
        } while (member !== frame.node);
        const selfImport = graph.get(frame.node)!.includes(frame.node);
        if (component.length > 1 || selfImport) components.push(component);
      }
    }
  }
  return components.map((component) => cycleThrough(graph, new Set(component)));
}

/** One cycle inside a strongly connected component, from its first file (breadth-first, so a shortest one). */
function cycleThrough(graph: ImportGraph, component: ReadonlySet<string>): string {
  const start = [...component].sort()[0];
  const previous = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    for (const to of graph.get(queue[i]) ?? []) {
      if (!component.has(to)) continue;
      if (to === start) {
        const path: string[] = [];
        for (let at = queue[i]; at !== start; at = previous.get(at)!) path.unshift(at);
        return [start, ...path, start].join(" -> ");
      }
      if (!previous.has(to)) {
        previous.set(to, queue[i]);
        queue.push(to);
      }
    }
  }
  return [...component].join(" -> ");
}

describe("layering (DESIGN.md: dependencies point one way)", () => {
  const graph = readImportGraph();

  it("reads the modules of every scanned folder", () => {
    expect(graph.size).toBeGreaterThan(100);
    for (const layer of ["envs", "protocol", "src/rollout", "src/llm", "src/server", "src/cli"])
      expect([...graph.keys()].some((file) => layerOf(file) === layer)).toBe(true);
    expect(graph.get("src/index.ts")?.length).toBeGreaterThan(0);
  });

  it("has no import between folders that the table does not allow", () => {
    expect(forbiddenImports(graph)).toEqual([]);
  });

  it("has no import cycle between files", () => {
    expect(importCycles(graph)).toEqual([]);
  });

  it("has no two modules of one layer with the same file name (index.ts, a folder's entry, aside)", () => {
    expect(sharedNames([...graph.keys()])).toEqual([]);
  });

  it("has nothing under src/, bench/ or scripts/ importing test/ (what both use lives outside test/)", () => {
    const outside = readImportGraph(NOT_TESTS);
    expect([...outside.keys()].some((file) => file.startsWith("bench/"))).toBe(true);
    expect(testImports(outside)).toEqual([]);
  });
});

describe("python/: the Python side, outside protocol/", () => {
  it("holds the three packages, the examples and one pyproject.toml that packages all three, and no TypeScript", () => {
    const pyFiles = filesUnder("python");
    for (const pkg of PY_PACKAGES) expect(pyFiles).toContain(`python/${pkg}/__init__.py`);
    expect(pyFiles.some((file) => file.startsWith("python/examples/") && file.endsWith(".py"))).toBe(true);
    const pyproject = readFileSync(join(ROOT, "python", "pyproject.toml"), "utf8");
    const packages = /^packages = \[(.*)\]$/m.exec(pyproject)?.[1];
    expect(packages?.split(",").map((name) => name.trim().replace(/"/g, ""))).toEqual(PY_PACKAGES);
    expect(pyFiles.filter((file) => /\.[cm]?[jt]s$/.test(file))).toEqual([]);
  });

  it("has packages that import none of each other (the client never pulls the engine)", () => {
    const sources = new Map(
      filesUnder("python")
        .filter((file) => file.endsWith(".py"))
        .map((file) => [file, readFileSync(join(ROOT, file), "utf8")]),
    );
    expect(sources.size).toBeGreaterThan(10);
    expect(crossPackageImports(sources)).toEqual([]);
  });

  it("leaves no Python in protocol/ but the stubs, and each stub's ImportError names python/", () => {
    const protocolPy = filesUnder("protocol").filter((file) => /\.(py|pyi|toml|cfg)$/.test(file));
    expect(protocolPy.sort()).toEqual([...PY_STUBS].sort());
    // One interpreter tries all three, so the check costs one Python start.
    const tryEach = `for name in ${JSON.stringify(PY_PACKAGES)}:
    try:
        __import__(name)
        print(name, "imported")
    except ImportError as error:
        print(error)`;
    const r = spawnSync("python3", ["-c", tryEach], {
      cwd: ROOT,
      env: { ...process.env, PYTHONPATH: "protocol/python", PYTHONDONTWRITEBYTECODE: "1" },
      encoding: "utf8",
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim().split("\n")).toEqual(
      PY_PACKAGES.map(
        (pkg) =>
          `${pkg} moved from protocol/python/ to python/: pip install -e python, or sys.path.insert(0, 'python') (PYTHONPATH=python)`,
      ),
    );
  });
});

describe("the layering checks themselves", () => {
  it("name two modules of one layer sharing a file name, not two layers or two index.ts", () => {
    expect(
      sharedNames([
        "src/server/updates.ts",
        "src/server/frames/updates.ts",
        "src/llm/updates.ts",
        "envs/index.ts",
        "envs/sokoban/index.ts",
      ]),
    ).toEqual(["src/server: updates.ts (src/server/updates.ts, src/server/frames/updates.ts)"]);
  });

  it("name a back-edge and a folder missing from the table", () => {
    const graph = new Map([
      ["src/llm/policy.ts", ["src/rollout/prompt.ts", "src/llm/chat.ts"]],
      ["src/rollout/prompt.ts", ["src/llm/chat.ts", "envs/registry.ts"]],
      ["src/util/x.ts", ["envs/registry.ts"]],
      ["envs/registry.ts", ["test/helpers/x.ts"]],
    ]);
    expect(forbiddenImports(graph)).toEqual([
      "src/llm/policy.ts -> src/rollout/prompt.ts (src/llm may not import src/rollout)",
      "src/util/x.ts: layer src/util is not in the table (add it to ALLOWED)",
      "envs/registry.ts -> test/helpers/x.ts (envs may not import test)",
    ]);
  });

  it("name an import of test/ from outside it", () => {
    const graph = new Map([
      ["bench/attacks.ts", ["test/helpers/ws-client.ts", "src/client/node.ts"]],
      ["src/client/node.ts", ["src/client/protocol-client.ts"]],
    ]);
    expect(testImports(graph)).toEqual(["bench/attacks.ts -> test/helpers/ws-client.ts"]);
  });

  it("name a python/ package importing another, not its own modules or an example's imports", () => {
    const files = new Map([
      [
        "python/rollgym_client/pack.py",
        "import os\nfrom .batch import Batch\n    from rollgym_engine.model import TinyLM\n",
      ],
      [
        "python/rollgym_envs/env.py",
        "from rollgym_envs.origin import normal_origin\n# import rollgym_client in a comment\n",
      ],
      ["python/examples/train.py", "from rollgym_client import Client\nfrom rollgym_engine import model\n"],
    ]);
    expect(crossPackageImports(files)).toEqual(["python/rollgym_client/pack.py -> rollgym_engine"]);
  });

  it("find cycles of two or more files and self-imports, inside a folder too", () => {
    const graph = new Map([
      ["src/rollout/batch.ts", ["src/rollout/token-episode.ts", "src/rollout/turns.ts"]],
      ["src/rollout/token-episode.ts", ["src/rollout/turns.ts", "src/rollout/batch.ts"]],
      ["src/rollout/turns.ts", []],
      ["src/llm/a.ts", ["src/llm/b.ts"]],
      ["src/llm/b.ts", ["src/llm/c.ts"]],
      ["src/llm/c.ts", ["src/llm/a.ts"]],
      ["src/llm/self.ts", ["src/llm/self.ts"]],
    ]);
    expect(importCycles(graph).sort()).toEqual([
      "src/llm/a.ts -> src/llm/b.ts -> src/llm/c.ts -> src/llm/a.ts",
      "src/llm/self.ts -> src/llm/self.ts",
      "src/rollout/batch.ts -> src/rollout/token-episode.ts -> src/rollout/batch.ts",
    ]);
    expect(
      importCycles(
        new Map([
          ["a.ts", ["b.ts"]],
          ["b.ts", []],
        ]),
      ),
    ).toEqual([]);
  });
});
