// No function in the server or the rollout engine runs over MAX_LINES lines (issue #29: the
// 245-line Rollout.run and the 179-line buildServer had become knots). Functions are found by
// TypeScript's own parser: declarations, methods, accessors, constructors, arrows and function
// expressions alike, each counted from its first line to its last, nested ones included. The web
// page's browser code (src/server/web/client/) is not the server's and is left out for now: its
// mount() functions still run to 400 lines.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SCANNED = ["src/server", "src/rollout"];
const MAX_LINES = 120;

interface FunctionSpan {
  /** "path:line name" (repository-relative path, 1-based line). */
  where: string;
  lines: number;
}

function modulesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return modulesUnder(path);
    return path.endsWith(".ts") && !path.endsWith(".d.ts") ? [path] : [];
  });
}

/** Every function with a body in `source`, with its length in lines. */
function functionSpans(path: string, source: string): FunctionSpan[] {
  const file = ts.createSourceFile(path, source, ts.ScriptTarget.Latest, true);
  const spans: FunctionSpan[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.end).line;
      const name = node.name && ts.isIdentifier(node.name) ? node.name.text : "(anonymous)";
      spans.push({ where: `${path}:${first + 1} ${name}`, lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return spans;
}

/** The functions over `max` lines, as "path:line name: N lines". */
function overLong(spans: readonly FunctionSpan[], max: number): string[] {
  return spans.filter((s) => s.lines > max).map((s) => `${s.where}: ${s.lines} lines (at most ${max})`);
}

describe("function length", () => {
  const spans = SCANNED.flatMap(modulesUnder).flatMap((path) =>
    functionSpans(path, readFileSync(join(ROOT, path), "utf8")),
  );

  it("reads the functions of every scanned folder, nested and anonymous ones too", () => {
    for (const dir of SCANNED) expect(spans.some((s) => s.where.startsWith(`${dir}/`))).toBe(true);
    expect(spans.some((s) => s.where.startsWith("src/server/delivery/"))).toBe(true);
    expect(spans.some((s) => s.where.startsWith("src/server/web/client/"))).toBe(true);
    expect(spans.some((s) => s.where.endsWith(" (anonymous)"))).toBe(true);
  });

  it("names a function over the bound with its file, line and length", () => {
    const source = `export class A {\n  m() {\n${"    f();\n".repeat(4)}    const g = () => {\n      h();\n    };\n  }\n}\n`;
    expect(overLong(functionSpans("x.ts", source), 3)).toEqual(["x.ts:2 m: 9 lines (at most 3)"]);
    expect(overLong(functionSpans("x.ts", source), 2)).toEqual([
      "x.ts:2 m: 9 lines (at most 2)",
      "x.ts:7 (anonymous): 3 lines (at most 2)",
    ]);
  });

  it(`has no function over ${MAX_LINES} lines in ${SCANNED.join(" and ")}`, () => {
    expect(overLong(spans, MAX_LINES)).toEqual([]);
  });
});
