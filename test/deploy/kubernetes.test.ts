// deploy/kubernetes/: every manifest is a Kubernetes object that passes the API's own schemas
// (kubernetes-models, generated from Kubernetes' OpenAPI definitions), and what the manifests
// say about rollgym agrees with the code: the port, the probes' route and what it answers while
// closing, the grace period against the shutdown deadline, the serve flags, the config file,
// the tuned runtime and the memory limit against the bounds of docs/server.md. No cluster here:
// what a kubelet would do with them is not run (docs/kubernetes.md).
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Service } from "kubernetes-models/v1/Service";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import * as memory from "../../bench/attacks/bounds.ts";
import { parseArgs } from "../../src/cli/args.ts";
import { runtimeLines } from "../../src/cli/runtime.ts";
import { DEFAULT_PORT, SERVE_FLAGS, SHUTDOWN_DEADLINE_S } from "../../src/cli/serve.ts";
import { loadConfig } from "../../src/config/load.ts";
import { buildServer } from "../../src/server/app.ts";
import { DEFAULT_CONNECTION_LIMITS } from "../../src/server/connections.ts";
import { limitOptions } from "../../src/server/limits.ts";
import { DEFAULT_LIMITS } from "../../src/server/state.ts";
import { ROOT } from "../helpers/cli.ts";
import { stalledRollout, TestClient } from "../helpers/ws-client.ts";
import { IMAGE } from "./image.ts";

const DIR = join(ROOT, "deploy", "kubernetes");

/** The kinds the manifests may hold, each with its schema (a new kind needs its model here). */
const MODELS: Record<string, new (data: object) => { validate(): void }> = {
  "v1/ConfigMap": ConfigMap,
  "v1/Service": Service,
  "apps/v1/StatefulSet": StatefulSet,
};

// biome-ignore lint/suspicious/noExplicitAny: manifests are read field by field, as YAML gives them
type Manifest = any;

/** Every object of every YAML file under deploy/kubernetes/, with the file it came from. */
function manifests(): { file: string; object: Manifest }[] {
  return readdirSync(DIR)
    .filter((file) => /\.ya?ml$/.test(file))
    .flatMap((file) =>
      parseAllDocuments(readFileSync(join(DIR, file), "utf8")).map((doc) => {
        if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`);
        return { file, object: doc.toJS() };
      }),
    );
}

/** The object as its kind's model; throws for a kind the table does not know. */
function model(object: Manifest): { validate(): void } {
  const Kind = MODELS[`${object.apiVersion}/${object.kind}`];
  if (!Kind) throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
  return new Kind(object);
}

function only(kind: string): Manifest {
  const found = manifests().filter((m) => m.object.kind === kind);
  expect(found, kind).toHaveLength(1);
  return structuredClone(found[0].object);
}

const statefulSet = () => only("StatefulSet");
const container = (set: Manifest = statefulSet()) => set.spec.template.spec.containers[0];
/** The serve options of the container's command line (after `serve`). */
const serveArgs = (): string[] => {
  const command: string[] = container().command;
  return command.slice(command.indexOf("serve") + 1);
};

/** Mebibytes of a Kubernetes quantity such as 4608Mi or 4Gi. */
function mebibytes(quantity: string): number {
  const match = /^(\d+)(Mi|Gi)$/.exec(quantity);
  if (!match) throw new Error(`unexpected quantity ${quantity}`);
  return Number(match[1]) * (match[2] === "Gi" ? 1024 : 1);
}

describe("the manifests against the Kubernetes schemas", () => {
  it("are a ConfigMap, a Service and a StatefulSet, each valid for its kind", () => {
    const all = manifests();
    expect(all.map((m) => m.object.kind).sort()).toEqual(["ConfigMap", "Service", "StatefulSet"]);
    for (const { file, object } of all) expect(() => model(object).validate(), file).not.toThrow();
  });

  it("refuses broken copies, so the check above can fail", () => {
    const wrongType = statefulSet();
    container(wrongType).ports[0].containerPort = "8787";
    expect(() => model(wrongType).validate()).toThrow(/containerPort must be integer/);
    const noSelector = statefulSet();
    delete noSelector.spec.selector;
    expect(() => model(noSelector).validate()).toThrow(/selector/);
    const service = only("Service");
    service.spec.ports[0].port = "http";
    expect(() => model(service).validate()).toThrow(/port must be integer/);
    expect(() => model({ apiVersion: "v1", kind: "Secret" })).toThrow(/no schema for v1 Secret/);
  });
});

describe("the manifests against rollgym", () => {
  it("address pods by name through a headless Service that selects the StatefulSet's pods", () => {
    const set = statefulSet();
    const service = only("Service");
    expect(service.spec.clusterIP).toBe("None");
    expect(set.spec.serviceName).toBe(service.metadata.name);
    const labels = set.spec.template.metadata.labels;
    expect(set.spec.selector.matchLabels).toEqual(labels);
    expect(labels).toMatchObject(service.spec.selector);
    // The Service's port reaches the container's by name.
    expect(container(set).ports.map((p: Manifest) => p.name)).toContain(service.spec.ports[0].targetPort);
  });

  it("serve on its default port, the one the container, the Service and Prometheus name", () => {
    const set = statefulSet();
    const args = serveArgs();
    expect(Number(args[args.indexOf("--port") + 1])).toBe(DEFAULT_PORT);
    expect(container(set).ports[0].containerPort).toBe(DEFAULT_PORT);
    expect(only("Service").spec.ports[0].port).toBe(DEFAULT_PORT);
    expect(set.spec.template.metadata.annotations).toMatchObject({
      "prometheus.io/scrape": "true",
      "prometheus.io/port": String(DEFAULT_PORT),
      "prometheus.io/path": "/metrics",
    });
    expect(args[args.indexOf("--host") + 1]).toBe("0.0.0.0");
  });

  it("run the image's tuned command line with real serve flags only", () => {
    const args = serveArgs();
    const parsed = parseArgs("serve", args, SERVE_FLAGS);
    expect(parsed.positionals).toEqual([]);
    // What `rollgym serve --print-runtime ARGS` prints in the image, as the container's command.
    const printed = runtimeLines(args, IMAGE.jemalloc, IMAGE.node, IMAGE.script);
    const cmd = printed.split("\n").find((line) => line.startsWith("CMD "))!;
    expect(container().command).toEqual(JSON.parse(cmd.slice(4)));
    // A flag serve does not know is a usage error, so the check above means something.
    expect(() => parseArgs("serve", [...args, "--shutdown-deadlin", "30"], SERVE_FLAGS)).toThrow(
      /shutdown-deadlin/,
    );
  });

  it("give the drain its deadline and more before SIGKILL, and never kill a draining pod for liveness", () => {
    const set = statefulSet();
    const args = serveArgs();
    const at = args.indexOf("--shutdown-deadline");
    const deadline = at < 0 ? SHUTDOWN_DEADLINE_S : Number(args[at + 1]);
    expect(deadline).toBeGreaterThanOrEqual(SHUTDOWN_DEADLINE_S);
    // docs/server.md "Shutdown": at most the deadline plus about 6 s (three 2 s bounds).
    const grace = set.spec.template.spec.terminationGracePeriodSeconds;
    expect(grace).toBeGreaterThanOrEqual(deadline + 6);
    const liveness = container(set).livenessProbe;
    expect(liveness.failureThreshold * liveness.periodSeconds).toBeGreaterThan(grace);
  });

  it("read the tokens and the engines' key from the Secret, in the variables rollgym reads", () => {
    const env: Manifest[] = container().env;
    const fromSecret = env.filter((e) => e.valueFrom?.secretKeyRef).map((e) => e.name);
    expect(fromSecret).toEqual(["ROLLGYM_TOKEN", "ROLLGYM_TRAINER_TOKEN", "OPENAI_API_KEY"]);
    // The bearer token is required: a pod never serves without one.
    expect(env.find((e) => e.name === "ROLLGYM_TOKEN").valueFrom.secretKeyRef.optional).toBeUndefined();
    const sources = ["src/cli/serve.ts", "src/llm/openai-chat.ts"].map((f) =>
      readFileSync(join(ROOT, f), "utf8"),
    );
    for (const name of fromSecret) expect(sources.join("\n")).toMatch(new RegExp(`\\b${name}\\b`));
  });

  it("pass the ConfigMap's file as --config, and rollgym loads it", () => {
    const set = statefulSet();
    const args = serveArgs();
    const path = args[args.indexOf("--config") + 1];
    const configMap = only("ConfigMap");
    const volume = set.spec.template.spec.volumes.find((v: Manifest) => v.configMap);
    expect(volume.configMap.name).toBe(configMap.metadata.name);
    const mount = container(set).volumeMounts.find((m: Manifest) => m.name === volume.name);
    expect(path.startsWith(`${mount.mountPath}/`)).toBe(true);
    expect(Object.keys(configMap.data)).toEqual([path.slice(`${mount.mountPath}/`.length)]);
    const config = configMapConfig();
    expect(config.rollgym.llm.base_url?.length).toBeGreaterThan(0);
    expect(config.rollgym.llm.model).toBeTruthy();
  });

  it("limit memory to at least docs/server.md's bound with every limit at its default", () => {
    const C = DEFAULT_CONNECTION_LIMITS;
    const L = DEFAULT_LIMITS;
    // "Memory bounds, from the limits": each line at its bound at once (3,740 MiB).
    const lines = memory.bound(
      Math.max(memory.heldText(), memory.episodes(L.maxEpisodesInFlight)),
      memory.frames(C.maxConnections),
      memory.sockets(C.maxConnections + C.maxPendingConnections),
      memory.uploads(),
      memory.watchers(),
    );
    const atStart = 150;
    // Which holds only while the ConfigMap leaves every limit at its default.
    expect(limitOptions(configMapConfig())).toEqual(limitOptions(loadConfig({}).config));
    const replicas = Math.max(16, configMapConfig().rollgym.llm.base_url?.length ?? 0);
    const { requests, limits } = container().resources;
    expect(mebibytes(limits.memory)).toBeGreaterThanOrEqual(lines + atStart + 5 * replicas);
    expect(mebibytes(requests.memory)).toBeLessThanOrEqual(mebibytes(limits.memory));
    // The heap limit lets the memory budget keep its 512 MiB default (an eighth of the limit).
    const heap = /--max-old-space-size=(\d+)/.exec(
      container().env.find((e: Manifest) => e.name === "NODE_OPTIONS").value,
    );
    expect(Number(heap![1]) / 8).toBeGreaterThanOrEqual(DEFAULT_LIMITS.maxHeldBytes! / 2 ** 20);
  });
});

/** The ConfigMap's one config file, as rollgym loads it. */
function configMapConfig() {
  const data = only("ConfigMap").data;
  const [key] = Object.keys(data);
  const file = join(mkdtempSync(join(tmpdir(), "rollgym-k8s-")), key);
  writeFileSync(file, data[key]);
  return loadConfig({ files: [file] }).config;
}

describe("the probes' route and the scrape target", () => {
  it("/healthz answers 200 while serving and 503 once SIGTERM's drain has begun; /metrics answers", async () => {
    const path = container().readinessProbe.httpGet.path;
    expect(container().livenessProbe.httpGet.path).toBe(path);
    // With a token, as the manifests require one: probes and scrapes carry none.
    const token = "k8s-test-token";
    const server = await buildServer({ token, shutdownDeadlineMs: 600_000 });
    const url = await server.listen(0);
    expect((await fetch(`${url}${path}`)).status).toBe(200);
    // The scrape target is there too, without a token, as Prometheus asks for it.
    const scraped = statefulSet().spec.template.metadata.annotations["prometheus.io/path"];
    expect(await (await fetch(`${url}${scraped}`)).text()).toContain("rollgym_active_rollouts");
    // A stream rollout nobody acknowledges keeps the drain waiting for its deadline.
    const client = await TestClient.connect(url, { token });
    await stalledRollout(client, "held");
    const closed = server.shutdown();
    await client.next((f) => f.type === "closing");
    const health = await fetch(`${url}${path}`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ status: "closing" });
    // A second call hurries the drain (the second SIGTERM).
    server.shutdown();
    await closed;
    await client.closed();
  });
});
