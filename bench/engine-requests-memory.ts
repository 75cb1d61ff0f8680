// RSS of engine requests in flight (docs/server.md "Memory bounds, from the limits"): N requests on
// src/llm/http.ts's client, each with a body of its own (a 4 KiB history JSON), held unanswered by an
// engine in another process, then answered. node --expose-gc bench/engine-requests-memory.ts [N]
import { spawn } from "node:child_process";

const { EngineConnections, JsonText, requestJson } = await import(
  process.env.HTTP_TS ?? "../src/llm/http.ts"
);

const N = Number(process.argv[2] ?? 10240);
const server = spawn(
  process.execPath,
  [
    "-e",
    `
  const net = require("node:net"); const held = []; let seen = 0;
  const answer = '{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}';
  const s = net.createServer((c) => { let got = ""; c.on("data", (d) => { got += d; const e = got.indexOf("\\r\\n\\r\\n"); const m = /content-length: (\\d+)/.exec(got); if (e !== -1 && m && got.length >= e + 4 + Number(m[1])) { held.push(c); got = ""; if (++seen % ${N} === 0) console.log("held " + seen); } }); });
  s.listen(0, "127.0.0.1", () => console.log("port " + s.address().port));
  process.stdin.on("data", () => { for (const c of held.splice(0)) c.write("HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: " + answer.length + "\\r\\n\\r\\n" + answer); });
`,
  ],
  { stdio: ["pipe", "pipe", "inherit"] },
);
const lines: string[] = [];
server.stdout.setEncoding("utf8").on("data", (d: string) => lines.push(...d.trim().split("\n")));
const waitFor = async (prefix: string) => {
  while (!lines.some((l) => l.startsWith(prefix))) await new Promise((r) => setTimeout(r, 50));
  return lines.find((l) => l.startsWith(prefix))!;
};
const port = Number((await waitFor("port")).split(" ")[1]);
const url = `http://127.0.0.1:${port}/v1/chat/completions`;
const system = JSON.stringify({ role: "system", content: "s".repeat(1600) });
const rss = () => {
  (globalThis as unknown as { gc(): void }).gc();
  (globalThis as unknown as { gc(): void }).gc();
  return process.memoryUsage();
};
const mib = (b: number) => (b / 2 ** 20).toFixed(1);
for (let round = 0; round < Number(process.env.ROUNDS ?? 3); round++) {
  // New connections each round: one per request in flight is part of what a request costs.
  const connections = new EngineConnections();
  const before = rss();
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < N; i++) {
    // Each request's history is its own (the episode's state text), joined the way HistoryJson joins it.
    const user = JSON.stringify({ role: "user", content: `${round} ${i} `.padEnd(2400, "u") });
    const body = new JsonText(`{"model":"m","messages":[${system},${user}],"max_tokens":2,"seed":${i}}`);
    pending.push(requestJson("POST", url, body, { timeoutMs: 600_000, connections }));
  }
  lines.length = 0;
  await waitFor(`held`);
  await new Promise((r) => setTimeout(r, 500));
  const during = rss();
  server.stdin.write("go\n");
  const answers = await Promise.all(pending);
  const after = rss();
  console.log(
    `round ${round}: ${N} in flight: RSS +${mib(during.rss - before.rss)} MiB (${((during.rss - before.rss) / N / 1024).toFixed(1)} KiB each), heap +${mib(during.heapUsed - before.heapUsed)}, external +${mib(during.external - before.external)}; answered ${answers.length}; RSS after ${mib(after.rss)} (start ${mib(before.rss)})`,
  );
  await connections.close();
  await new Promise((r) => setTimeout(r, 1000));
}
server.kill();
