#!/usr/bin/env node
// Entry point for `npx rollgym`. In a checkout Node 24 runs the TypeScript sources directly
// (type stripping); the published package ships them compiled to dist/, since Node does not
// strip types under node_modules.
import { existsSync } from "node:fs";

const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  process.stderr.write(
    `rollgym: needs Node.js 24 or newer (this is ${process.version}); install Node 24 LTS, or run it through npm in a checkout (npx rollgym, npm start) so the pinned node devDependency is used\n`,
  );
  process.exit(2);
}
const source = new URL("../src/cli/main.ts", import.meta.url);
const { runMain } = await import(
  existsSync(source) ? source.href : new URL("../dist/src/cli/main.js", import.meta.url).href
);
await runMain();
