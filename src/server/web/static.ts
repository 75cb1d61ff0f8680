// The page's static files. Its TypeScript modules are served as JavaScript by stripping their
// types (Node's own type stripping, the same erasable-syntax rule the server's code follows), so
// there is no build step, no bundler and nothing to go stale; the browser loads the modules by
// their `.ts` URLs. @msgpack/msgpack's ESM build is served from node_modules for the protocol.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire, stripTypeScriptTypes } from "node:module";
import { dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";

export interface StaticFile {
  body: Buffer;
  type: string;
}

const CLIENT_DIR = fileURLToPath(new URL("./client/", import.meta.url));
// Modules outside client/ the page imports, by the URL its relative imports resolve to (a
// browser stops `../` at the root) → their path from the package root: the episode-file reader
// is the one the CLI and the upload route use, and the protocol client the one the bench and
// the tests use, with the codec and the wait queue under it; the seed bound and the plain-object test, the server's own.
const SHARED_MODULES: Readonly<Record<string, string>> = {
  "/record/episode-reader": "src/record/episode-reader",
  "/client/protocol-client": "src/client/protocol-client",
  "/concurrency/wait-queue": "src/concurrency/wait-queue",
  "/protocol/codec": "protocol/codec",
  "/protocol/decoded-size": "protocol/decoded-size",
  "/protocol/version": "protocol/version",
  "/protocol/seeds": "protocol/seeds",
  "/protocol/plain-object": "protocol/plain-object",
};
const PACKAGE_DIR = fileURLToPath(new URL("../../../", import.meta.url));
const MSGPACK_DIR = join(
  dirname(createRequire(import.meta.url).resolve("@msgpack/msgpack/package.json")),
  "dist.esm",
);

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".ts": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
};

/** JavaScript from an erasable-syntax TypeScript module (type-only imports vanish). */
function stripTypes(source: string): string {
  // The API is marked experimental in Node 24 and warns once; the warning is noise for a server.
  const emit = process.emitWarning;
  process.emitWarning = () => {};
  try {
    return stripTypeScriptTypes(source, { mode: "strip" });
  } finally {
    process.emitWarning = emit;
  }
}

let loaded: Map<string, StaticFile> | null = null;

/** Every file the page may load, by URL path, read and prepared once per process. */
export function loadStaticFiles(): Map<string, StaticFile> {
  loaded ??= readStaticFiles();
  return loaded;
}

function readStaticFiles(): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  for (const name of readdirSync(CLIENT_DIR)) {
    const type = TYPES[extname(name)];
    // A compiled package (dist/) also holds declarations and JavaScript beside the sources.
    if (!type || name.endsWith(".d.ts")) continue;
    const text = readFileSync(join(CLIENT_DIR, name), "utf8");
    const body = Buffer.from(extname(name) === ".ts" ? stripTypes(text) : text);
    files.set(name === "index.html" ? "/" : `/web/${name}`, { body, type });
  }
  for (const [url, path] of Object.entries(SHARED_MODULES)) {
    // From source, the TypeScript; in a compiled package (dist/), the JavaScript tsc made of it,
    // whose imports name `.js` files: each module is served under both names.
    const source = join(PACKAGE_DIR, `${path}.ts`);
    const text = existsSync(source)
      ? stripTypes(readFileSync(source, "utf8"))
      : readFileSync(join(PACKAGE_DIR, `${path}.js`), "utf8");
    for (const extension of [".ts", ".js"])
      files.set(`${url}${extension}`, { body: Buffer.from(text), type: TYPES[".ts"] });
  }
  for (const entry of readdirSync(MSGPACK_DIR, { recursive: true, encoding: "utf8" })) {
    if (!entry.endsWith(".mjs")) continue;
    // Source map comments would make the browser ask for maps nobody serves.
    const text = readFileSync(join(MSGPACK_DIR, entry), "utf8").replace(/^\/\/# sourceMappingURL=.*$/m, "");
    files.set(`/vendor/msgpack/${entry.split("\\").join("/")}`, {
      body: Buffer.from(text),
      type: TYPES[".mjs"],
    });
  }
  return files;
}
