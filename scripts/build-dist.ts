// Compiles the package to dist/ for `npm pack` (prepack): Node strips types only outside
// node_modules, so an installed rollgym runs JavaScript. Sources that read ../../package.json
// (the version) find dist/package.json, written here with the same version.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" });
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
writeFileSync(
  join(dist, "package.json"),
  `${JSON.stringify({ type: "module", version: pkg.version, private: true }, null, 2)}\n`,
);
// The web page's client modules are served from disk (types stripped when served), not imported.
const client = join(root, "src", "server", "web", "client");
if (existsSync(client)) cpSync(client, join(dist, "src", "server", "web", "client"), { recursive: true });
