#!/usr/bin/env node
// Entry point for `npx rollgym`. The CLI is TypeScript run directly by Node 24's type stripping.
const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  process.stderr.write(
    `rollgym: needs Node 24 or newer (this is ${process.version}); run it through npm (npx rollgym, npm start) so the pinned node devDependency is used\n`,
  );
  process.exit(2);
}
await import("../src/cli/main.ts");
