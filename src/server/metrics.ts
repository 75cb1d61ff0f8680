// Prometheus metrics of the server (GET /metrics), and a policy wrapper that times inference.
import client from "prom-client";
import type { Policy, PolicyRequest, PolicyResponse } from "../llm/policy.ts";
import type { ReplicaSnapshot } from "../llm/replicas.ts";
import type { TokenEngine } from "../llm/token-engine.ts";

/** What /metrics reads of the trainer's weight updates when scraped (update-coordinator.ts). */
export interface UpdateGauges {
  open: boolean;
  ageS: number;
  pausedReplicas: number;
  ordinal: number;
  trainerConnected: boolean;
}

/** Gauges read from the server's state when scraped, so they cannot drift from it. */
export interface GaugeSources {
  queuedGroups: () => number;
  connectedClients: () => number;
  replicas: () => ReplicaSnapshot[];
  /** The trainer's weight updates (no id or token: those stay out of label values). */
  updates?: () => UpdateGauges;
}

export interface ServerMetrics {
  registry: client.Registry;
  rollouts: client.Counter<"mode" | "delivery">;
  episodes: client.Counter<"outcome">;
  turns: client.Counter;
  inference: client.Histogram<"outcome">;
  completionTokens: client.Counter;
  activeRollouts: client.Gauge;
  staleGroupsDropped: client.Counter;
  weightUpdates: client.Counter<"outcome">;
}

export function createMetrics(sources: GaugeSources): ServerMetrics {
  const registry = new client.Registry();
  // Process metrics include nodejs_eventloop_lag_seconds.
  client.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 20 });
  const registers = [registry];
  new client.Gauge({
    name: "rollgym_queued_groups",
    help: "Finished groups not yet acknowledged by their clients (queued or in flight)",
    registers,
    collect() {
      this.set(sources.queuedGroups());
    },
  });
  new client.Gauge({
    name: "rollgym_connected_clients",
    help: "Open WebSocket connections",
    registers,
    collect() {
      this.set(sources.connectedClients());
    },
  });
  if (sources.updates) updateGauges(sources.updates, registers);
  // One series per engine replica: in flight, healthy (1/0), requests served.
  const perReplica = (name: string, help: string, value: (r: ReplicaSnapshot) => number) =>
    new client.Gauge({
      name,
      help,
      labelNames: ["replica"],
      registers,
      collect() {
        for (const r of sources.replicas()) this.set({ replica: r.url }, value(r));
      },
    });
  perReplica(
    "rollgym_replica_in_flight",
    "Inference requests in flight per engine replica",
    (r) => r.inFlight,
  );
  perReplica("rollgym_replica_healthy", "1 while the replica is in rotation, 0 while it is probed", (r) =>
    r.healthy ? 1 : 0,
  );
  perReplica("rollgym_replica_requests", "Inference requests sent to the replica", (r) => r.requests);
  perReplica("rollgym_replica_failures", "Inference requests to the replica that failed", (r) => r.failures);
  return {
    registry,
    rollouts: new client.Counter({
      name: "rollgym_rollouts_total",
      help: "Rollouts started",
      labelNames: ["mode", "delivery"],
      registers,
    }),
    episodes: new client.Counter({
      name: "rollgym_episodes_total",
      help: "Episodes finished",
      labelNames: ["outcome"],
      registers,
    }),
    turns: new client.Counter({ name: "rollgym_turns_total", help: "Model turns applied", registers }),
    inference: new client.Histogram({
      name: "rollgym_inference_request_seconds",
      help: "Inference request latency, retries included",
      labelNames: ["outcome"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    completionTokens: new client.Counter({
      name: "rollgym_completion_tokens_total",
      help: "Tokens generated",
      registers,
    }),
    activeRollouts: new client.Gauge({
      name: "rollgym_active_rollouts",
      help: "Rollouts running",
      registers,
    }),
    staleGroupsDropped: new client.Counter({
      name: "rollgym_stale_groups_dropped_total",
      help: "Finished stream groups not sent because drop_older_than found them too old",
      registers,
    }),
    weightUpdates: new client.Counter({
      name: "rollgym_weight_updates_total",
      help: "Weight updates by outcome: ended (end_update), failed (pausing failed), abandoned (the trainer left; resumed at the old version), expired (open past max_update_s; resumed at the old version)",
      labelNames: ["outcome"],
      registers,
    }),
  };
}

/** The open weight update, its age and paused replicas, and the version ordinal in force. */
function updateGauges(read: () => UpdateGauges, registers: client.Registry[]): void {
  const gauge = (name: string, help: string, value: (u: UpdateGauges) => number) =>
    new client.Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(value(read()));
      },
    });
  gauge(
    "rollgym_update_open",
    "1 while a weight update is open (admission closed, engines paused), else 0",
    (u) => (u.open ? 1 : 0),
  );
  gauge(
    "rollgym_update_age_seconds",
    "Seconds since the open weight update's begin_update; 0 with none open",
    (u) => u.ageS,
  );
  gauge(
    "rollgym_update_paused_replicas",
    "Engine replicas paused by their own /pause for the open weight update; 0 with none open",
    (u) => u.pausedReplicas,
  );
  gauge("rollgym_update_trainer_connected", "1 while the trainer session has a connection, else 0", (u) =>
    u.trainerConnected ? 1 : 0,
  );
  gauge(
    "rollgym_version_ordinal",
    "The ordinal of the weight version in force (0 before the first update)",
    (u) => u.ordinal,
  );
}

/** The same policy, with every request timed and its tokens counted. */
export function instrumentPolicy(policy: Policy, metrics: ServerMetrics): Policy {
  // Label children resolved once: a labelled observe hashes its labels on every call.
  const ok = metrics.inference.labels({ outcome: "ok" });
  const failed = metrics.inference.labels({ outcome: "error" });
  return {
    name: policy.name,
    async generate(request: PolicyRequest): Promise<PolicyResponse> {
      const started = performance.now();
      try {
        const response = await policy.generate(request);
        ok.observe((performance.now() - started) / 1000);
        if (response.completionTokens) metrics.completionTokens.inc(response.completionTokens);
        return response;
      } catch (error) {
        failed.observe((performance.now() - started) / 1000);
        throw error;
      }
    },
    // Read through: a remote policy's meter appears at preflight, which may come after wrapping.
    get meter() {
      return policy.meter;
    },
    replicas: policy.replicas?.bind(policy),
    engineStatus: policy.engineStatus?.bind(policy),
    // Token mode's samples are inference requests too.
    tokenEngine: policy.tokenEngine && (() => timedSamples(policy.tokenEngine!(), ok, failed, metrics)),
    forget: policy.forget?.bind(policy),
    updates: policy.updates?.bind(policy),
    cannotPlay: policy.cannotPlay?.bind(policy),
    close: policy.close?.bind(policy),
  };
}

/** Times each sample of `engine` into the request histogram and counts its tokens (once per engine). */
function timedSamples(
  engine: TokenEngine | null,
  ok: { observe(seconds: number): void },
  failed: { observe(seconds: number): void },
  metrics: ServerMetrics,
): TokenEngine | null {
  if (engine && engine.onSample === null) {
    engine.onSample = (seconds, ids) => {
      if (ids === null) failed.observe(seconds);
      else {
        ok.observe(seconds);
        if (ids > 0) metrics.completionTokens.inc(ids);
      }
    };
  }
  return engine;
}
