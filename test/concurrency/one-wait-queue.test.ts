// Issue 29.4, "one of each": every caller that waits its turn parks in src/concurrency's
// WaitQueue, so no module of src/ grows its own waiter queue again. A hand-rolled one shows by
// four signs, looked for in the syntax (comments and strings do not count): a promise's
// resolver (or a local holding it) put into a collection, a collection of a `…Waiter` type, an
// array of callbacks (work parked to run later), and an array's head taken and called
// (`queue.shift()()`). Listeners kept in a Set are not a queue and pass.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * Files that still hold a waiter queue of their own, each with why (none today). The test fails
 * when one no longer does, so the entry goes with it.
 */
const KNOWN: Readonly<Record<string, string>> = {};

/** Calls that keep their argument for later: a resolver handed to one is a waiter in a queue. */
const STORING = new Set(["push", "unshift", "add"]);

function modules(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return modules(path);
    return path.endsWith(".ts") && !path.endsWith(".d.ts") ? [path] : [];
  });
}

function mentions(node: ts.Node, names: ReadonlySet<string>): boolean {
  if (ts.isIdentifier(node)) return names.has(node.text);
  return ts.forEachChild(node, (child) => mentions(child, names) || undefined) === true;
}

/** The names inside a promise's executor that hold its resolvers: the parameters, and locals built from them. */
function resolverNames(executor: ts.ArrowFunction | ts.FunctionExpression): Set<string> {
  const names = new Set(executor.parameters.map((p) => p.name.getText()));
  let grew = true;
  while (grew) {
    grew = false;
    const visit = (node: ts.Node): void => {
      if (
        ts.isVariableDeclaration(node) &&
        node.initializer &&
        !names.has(node.name.getText()) &&
        mentions(node.initializer, names)
      ) {
        names.add(node.name.getText());
        grew = true;
      }
      ts.forEachChild(node, visit);
    };
    visit(executor.body);
  }
  return names;
}

/** Each sign of a hand-rolled waiter queue in `source`, as "line N: what". */
function waiterQueues(source: string): string[] {
  const file = ts.createSourceFile("scanned.ts", source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const report = (node: ts.Node, what: string): void => {
    const line = file.getLineAndCharacterOfPosition(node.getStart()).line + 1;
    found.push(`line ${line}: ${what}: ${node.getText().split("\n")[0]}`);
  };
  const visit = (node: ts.Node): void => {
    if (ts.isNewExpression(node) && node.expression.getText() === "Promise") {
      const executor = node.arguments?.[0];
      if (executor && (ts.isArrowFunction(executor) || ts.isFunctionExpression(executor))) {
        const names = resolverNames(executor);
        const stores = (inner: ts.Node): void => {
          if (
            ts.isCallExpression(inner) &&
            ts.isPropertyAccessExpression(inner.expression) &&
            STORING.has(inner.expression.name.text) &&
            inner.arguments.some((argument) => mentions(argument, names))
          )
            report(inner, "a resolver kept in a collection");
          ts.forEachChild(inner, stores);
        };
        stores(executor.body);
      }
    }
    // Set<Waiter> as a type, or new Set<Waiter>().
    const collection = ts.isTypeReferenceNode(node)
      ? node.typeName
      : ts.isNewExpression(node)
        ? node.expression
        : null;
    if (collection && ["Set", "Array", "Map"].includes(collection.getText())) {
      const element = (node as ts.TypeReferenceNode | ts.NewExpression).typeArguments?.at(-1);
      if (element && /^\w*Waiter$/.test(element.getText())) report(node, "a collection of waiters");
    }
    if (ts.isArrayTypeNode(node) && /^\w*Waiter$/.test(node.elementType.getText()))
      report(node, "a collection of waiters");
    // (() => void)[] or Array<() => void>: work parked to run later, in order.
    const callbacks = ts.isArrayTypeNode(node)
      ? node.elementType
      : ts.isTypeReferenceNode(node) && node.typeName.getText() === "Array"
        ? node.typeArguments?.[0]
        : undefined;
    if (
      callbacks &&
      ts.isFunctionTypeNode(ts.isParenthesizedTypeNode(callbacks) ? callbacks.type : callbacks)
    )
      report(node, "an array of callbacks to run later");
    if (ts.isCallExpression(node) && /\.shift\(\)[!?.]*$/.test(node.expression.getText().replace(/\s/g, "")))
      report(node, "a queue's head taken and called");
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe("one wait queue", () => {
  it("recognises the hand-rolled queues it replaced, and not the WaitQueue that replaced them", () => {
    const handRolled = [
      // upload checks
      "const waiting: (() => void)[] = [];\nawait new Promise<void>((resolve) => waiting.push(resolve));",
      // the memory budget's groups
      "const set = new Set<Waiter>();\nnew Promise<boolean>((resolve) => {\n  const waiter = { admitted: () => resolve(true) };\n  set.add(waiter);\n});",
      // the replica pool's queue
      "class Q { private items = new Set<Waiter>(); }",
      "const queue: PoolWaiter[] = [];",
      "const byKey = new Map<string, Waiter>();",
      // the mock's slots and the OpenEnv pool
      "this.#queue.shift()?.();",
      "this.waiting.shift()!(server);",
      // connection upgrades and frames deferred while reading is paused
      "class G { private readonly upgrades: (() => void)[] = []; }",
      "let deferred: Array<(frame: Frame) => void> = [];",
    ];
    for (const source of handRolled) expect(waiterQueues(source), source).not.toEqual([]);
    const parked = [
      "const waiting = new WaitQueue<Waiter>();\nawait waiting.park({ bytes }, signal);\nwaiting.wakeNext();",
      "const byKey = new Map<string, Set<Parked<Waiter>>>();",
      // A reply awaited by request id is not a queue.
      "new Promise((resolve, reject) => this.running.set(id, { resolve, reject }));",
      // Listeners are not a queue.
      "const drainListeners = new Set<() => void>();",
      // Comments and strings are not code.
      '// waiting.push(resolve)\nconst s = "queue.shift()()";',
    ];
    for (const source of parked) expect(waiterQueues(source), source).toEqual([]);
  });

  it("is the only waiter queue in src/", () => {
    const found: Record<string, string[]> = {};
    for (const path of modules("src")) {
      if (path.startsWith("src/concurrency/")) continue;
      const signs = waiterQueues(readFileSync(join(ROOT, path), "utf8"));
      if (signs.length > 0) found[path] = signs;
    }
    const unknown = Object.entries(found).filter(([path]) => !(path in KNOWN));
    expect(unknown, "park callers in WaitQueue (src/concurrency/wait-queue.ts) instead").toEqual([]);
    const gone = Object.keys(KNOWN).filter((path) => !(path in found));
    expect(gone, "these hold no waiter queue any more: remove them from KNOWN").toEqual([]);
  });
});
