import { HealthCheckRequest } from "../../gen/health/v1/health.js";
import { BatchHeartbeatRequest, HeartbeatRequest, ListInstancesRequest, WatchInstancesRequest } from "../../gen/v1/registry_service.js";
import { createClient } from "../../src/client/index.js";
import { quantile, runInterleaved, runLoad, type LoadResult } from "./load.js";
import { RawClient } from "./raw-client.js";
import type { ServerProcess } from "./server-process.js";

const NAMESPACES = 10;
const SERVICES_PER_NAMESPACE = 10;
const INSTANCES_PER_SERVICE = 100;
const CONCURRENCY = 64;
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 10_000);
/** Heartbeats per BatchHeartbeat call: one agent renewing the instances on its host. */
export const HEARTBEATS_PER_BATCH = 100;
/** Turns of the no-op and Heartbeat, and of the no-op and the lists. */
const SLICES = 10;

/**
 * 10,000 registered instances (10 namespaces x 10 services x 100), each namespace's agents
 * authenticating with the namespace token as registry clients do: heartbeats across all of them,
 * and ListInstances of one 100-instance service, each taking turns with the no-op in the same run.
 * Returns the no-op and Heartbeat, BatchHeartbeat, then the lists' no-op and the two lists.
 */
export async function benchRegistry(server: ServerProcess, adminToken: string): Promise<LoadResult[]> {
  const admin = createClient({ address: server.grpcAddress, token: adminToken });
  const heartbeats: { token: string; request: Uint8Array; message: HeartbeatRequest }[] = [];
  const clients = new Map<string, RawClient>();
  try {
    for (let n = 0; n < NAMESPACES; n++) {
      const { namespace } = await admin.namespaces.createNamespace({ namespace: { name: `reg-bench-${n}` } });
      const token = namespace!.token!;
      clients.set(token, new RawClient(server.grpcAddress, token));
      const registrations: Promise<void>[] = [];
      for (let s = 0; s < SERVICES_PER_NAMESPACE; s++) {
        for (let i = 0; i < INSTANCES_PER_SERVICE; i++) {
          registrations.push(
            admin.registry
              .registerInstance({
                namespace: `reg-bench-${n}`,
                service: `svc-${s}`,
                host: `10.${n}.${s}.${i}`,
                port: 8080,
                // Longer than registering 10,000 takes on a loaded machine plus the scenarios after
                // the heartbeats: with 60 s, early instances expired before the heartbeat scenario
                // (which then measured revivals) and during the list scenarios (cache reloads).
                ttlSeconds: 600,
              })
              .then(({ instance }) => {
                const message = { namespace: instance!.namespace, service: instance!.service, instanceId: instance!.id };
                heartbeats.push({ token, message, request: HeartbeatRequest.encode(message).finish() });
              }),
          );
          // Keep at most a few hundred registrations in flight.
          if (registrations.length >= 200) await Promise.all(registrations.splice(0));
        }
      }
      await Promise.all(registrations);
    }

    const options = { concurrency: CONCURRENCY, durationMs: DURATION_MS, cpuMs: server.cpuMs };
    const raw = [...clients.values()][0]!;
    const health = HealthCheckRequest.encode({ service: "" }).finish();
    const list = ListInstancesRequest.encode({ namespace: "reg-bench-0", service: "svc-0", healthyOnly: false, index: 0, wait: undefined }).finish();
    const listHealthy = ListInstancesRequest.encode({ namespace: "reg-bench-0", service: "svc-0", healthyOnly: true, index: 0, wait: undefined }).finish();
    // Each batch holds one namespace's instances, sent with that namespace's token.
    const batches: { token: string; request: Uint8Array }[] = [];
    const byToken = Map.groupBy(heartbeats, (h) => h.token);
    for (const [token, group] of byToken) {
      for (let i = 0; i < group.length; i += HEARTBEATS_PER_BATCH) {
        const items = group.slice(i, i + HEARTBEATS_PER_BATCH).map((h) => h.message);
        batches.push({ token, request: BatchHeartbeatRequest.encode({ heartbeats: items }).finish() });
      }
    }
    return [
      // Heartbeat's target is a ratio to the no-op: the two take turns (see runInterleaved).
      ...(await runInterleaved(
        [
          { name: "no-op (grpc.health.v1.Health/Check)", call: () => raw.call("/grpc.health.v1.Health/Check", health) },
          {
            name: `Heartbeat (${heartbeats.length} instances)`,
            call: (i) => {
              const { token, request } = heartbeats[(i * 7919) % heartbeats.length]!;
              return clients.get(token)!.call("/v1.RegistryService/Heartbeat", request);
            },
          },
        ],
        { ...options, slices: SLICES },
      )),
      await runLoad(
        `BatchHeartbeat (${HEARTBEATS_PER_BATCH} per call)`,
        (i) => {
          const { token, request } = batches[i % batches.length]!;
          return clients.get(token)!.call("/v1.RegistryService/BatchHeartbeat", request);
        },
        { ...options, concurrency: 8 },
      ),
      // ListInstances' target is a ratio to the no-op too, so the lists take turns with a no-op of their
      // own. Each run alone after the heartbeat scenarios, against the no-op measured before them, the
      // first list read 0.29 of it in a full run and 0.52 in the registry section run alone just after.
      ...(await runInterleaved(
        [
          { name: "no-op (grpc.health.v1.Health/Check)", call: () => raw.call("/grpc.health.v1.Health/Check", health) },
          { name: "ListInstances (100 instances)", call: () => raw.call("/v1.RegistryService/ListInstances", list) },
          { name: "ListInstances healthy_only", call: () => raw.call("/v1.RegistryService/ListInstances", listHealthy) },
        ],
        { ...options, slices: SLICES },
      )),
    ];
  } finally {
    admin.close();
    for (const client of clients.values()) client.close();
  }
}

const WATCHERS = 1_000;
const WATCH_CHANNELS = 10;
const WATCH_CHANGES = 30;

export interface WatchRun {
  watchers: number;
  changes: number;
  /** From the start of the UpdateInstance call to a watcher receiving its change, over all watchers and changes. */
  p50Ms: number;
  p99Ms: number;
  /** Server CPU for the changes with the watchers open, less the same changes with none, per change per watcher. */
  cpuUsPerChangePerWatcher: number;
  /** Server CPU per change with no watcher open. */
  cpuUsPerChangeAlone: number;
}

/**
 * 1,000 WatchInstances streams on one service (over 10 client channels, as many clients would),
 * then one weight change at a time: how long until every watcher has it, and what it costs the
 * server per watcher, against the same changes made with no watcher open.
 */
export async function benchWatchers(server: ServerProcess, adminToken: string): Promise<WatchRun> {
  const admin = createClient({ address: server.grpcAddress, token: adminToken });
  // The watchers read their messages as bytes, undecoded, as the other scenarios' callers do: the
  // load generator shares the two cores with the server, and decoding was most of its work here.
  const clients = Array.from({ length: WATCH_CHANNELS }, () => new RawClient(server.grpcAddress, adminToken));
  try {
    await admin.namespaces.createNamespace({ namespace: { name: "watch-bench" } });
    const { instance } = await admin.registry.registerInstance({ namespace: "watch-bench", service: "api", host: "10.9.9.9", port: 80, ttlSeconds: 600 });
    let weight = 1;
    const change = () =>
      admin.registry.updateInstance({ namespace: "watch-bench", service: "api", instanceId: instance!.id, weight: weight++, updateMask: ["weight"] });

    const aloneStart = server.cpuMs();
    for (let i = 0; i < WATCH_CHANGES; i++) await change();
    const cpuUsPerChangeAlone = ((server.cpuMs() - aloneStart) * 1000) / WATCH_CHANGES;

    let started = 0;
    let waiting: { count: number; done: () => void } | undefined;
    const latencies: number[] = [];
    const request = WatchInstancesRequest.encode(WatchInstancesRequest.fromPartial({ namespace: "watch-bench", service: "api" })).finish();
    const streams = Array.from({ length: WATCHERS }, (_, i) => {
      const stream = clients[i % WATCH_CHANNELS]!.stream("/v1.RegistryService/WatchInstances", request);
      // The first message is the snapshot; every later one is a change, timed.
      const ready = new Promise<void>((resolve, reject) => {
        stream.once("data", () => {
          stream.on("data", () => {
            latencies.push(performance.now() - started);
            if (waiting && --waiting.count === 0) waiting.done();
          });
          resolve();
        });
        stream.once("error", reject);
      });
      return { stream, ready };
    });
    await Promise.all(streams.map((s) => s.ready));
    for (const { stream } of streams) stream.on("error", () => undefined); // cancelled at the end
    const cpuStart = server.cpuMs();
    for (let i = 0; i < WATCH_CHANGES; i++) {
      const all = new Promise<void>((resolve) => (waiting = { count: WATCHERS, done: resolve }));
      started = performance.now();
      await change();
      await all;
    }
    const cpuUs = (server.cpuMs() - cpuStart) * 1000;
    for (const { stream } of streams) stream.cancel();
    latencies.sort((x, y) => x - y);
    return {
      watchers: WATCHERS,
      changes: WATCH_CHANGES,
      p50Ms: quantile(latencies, 0.5),
      p99Ms: quantile(latencies, 0.99),
      cpuUsPerChangePerWatcher: (cpuUs - cpuUsPerChangeAlone * WATCH_CHANGES) / (WATCH_CHANGES * WATCHERS),
      cpuUsPerChangeAlone,
    };
  } finally {
    admin.close();
    for (const client of clients) client.close();
  }
}
