import http from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "node:worker_threads";
import { PublishEventRequest } from "../../gen/webhook/v1/webhook_service.js";
import { createClient } from "../../src/client/index.js";
import { signBody, verifySignature } from "../../src/webhooks/signature.js";
import { quantile } from "./load.js";
import { RawClient } from "./raw-client.js";
import type { ServerProcess } from "./server-process.js";

const WEBHOOKS = 10;
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 10_000);
/** Closed-loop publishers in the throughput run. */
const PUBLISHERS = 32;
/**
 * The throughput run keeps at most this many deliveries queued (published, not yet received): the
 * dispatcher always has work, and the queue does not grow without bound when publishing outpaces it.
 */
const BACKLOG_CAP = 2_000;
const CEILING_CONCURRENCY = 64;
/** Publishes in flight at most in a fixed-rate run. */
const MAX_IN_FLIGHT = 256;
/**
 * A fixed-rate run stops early once this many seconds' worth of its deliveries are queued: the rate
 * is then not sustainable, and the queue would take minutes to drain.
 */
const MAX_BACKLOG_SECONDS = 2;
/** Waiting for deliveries gives up after this long without a single one arriving. */
const STALL_MS = 15_000;
const SECRET = "whsec_bench_secret_0123456789abcdef0123456789abcdef";
const METHOD = "/webhook.v1.WebhookService/PublishEvent";
/** A request.completed event with the fields an internal service sends. */
const DATA = {
  trace_id: "3f9a1c2e-7b44-4e0a-9d51-6c2f0b8e1a77",
  api_key_id: "7d1e6f0a-2c3b-4a59-8e17-0f4b9c2d6e11",
  provider: "openai",
  model: "gpt-4o-mini",
  status: 200,
  tokens_in: 1234,
  tokens_out: 567,
  cost_usd: 0.00123,
};

export interface DeliveryRun {
  name: string;
  seconds: number;
  published: number;
  publishErrors: number;
  publishedPerSecond: number;
  /** Deliveries the receiver got while the publishers ran, per second. */
  deliveredPerSecond: number;
  /** Deliveries of the run's events (all received once drained). */
  delivered: number;
  /** Requests that repeated an X-Webhook-Id already received. */
  duplicates: number;
  /** Publish (the event's timestamp) to receipt, over every delivery of the run. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** PublishEvent round trips, as the publisher saw them. */
  publishP50Ms: number;
  publishP99Ms: number;
  /** Time after the publishers stopped until the last delivery arrived. */
  drainMs: number;
  drained: boolean;
  /** False when a fixed-rate run was stopped early because its queue kept growing. */
  sustained: boolean;
  /** Server CPU per delivery, in microseconds (the service process only, not PostgreSQL). */
  serverCpuUsPerDelivery: number;
  /** PostgreSQL's CPU per delivery, in microseconds (every process of the bench's cluster). */
  postgresCpuUsPerDelivery: number;
  /** This process's CPU per delivery, in microseconds: the publishers and the receiver. */
  benchCpuUsPerDelivery: number;
}

export interface WebhookBench {
  webhooks: number;
  bodyBytes: number;
  /** The receiver alone: undici.request POST loop, concurrency 64, same body and headers. */
  ceiling: { perSecond: number; requests: number; errors: number; firstError?: string; cpuUsPerRequest: number };
  saturated: DeliveryRun;
  fixed: DeliveryRun[];
}

/** A webhook receiver as a user would write one: verifies the signature, answers 200. */
class BenchReceiver {
  received = 0;
  badSignatures = 0;
  latencies: number[] = [];
  ids = new Set<string>();
  duplicates = 0;
  private readonly server: http.Server;

  constructor() {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const now = Date.now();
        const raw = Buffer.concat(chunks);
        if (!verifySignature(SECRET, raw, req.headers["x-webhook-signature"] as string | undefined)) this.badSignatures++;
        const id = req.headers["x-webhook-id"] as string;
        if (this.ids.has(id)) this.duplicates++;
        else this.ids.add(id);
        this.received++;
        this.latencies.push(now - Date.parse(req.headers["x-webhook-timestamp"] as string));
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("ok");
      });
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  /** Starts counting afresh. */
  reset(): void {
    this.received = 0;
    this.latencies = [];
    this.ids = new Set();
    this.duplicates = 0;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * Events published over gRPC (PublishEvent) with 10 subscribed webhooks pointing at a receiver in
 * this process: sustained deliveries/s and publish-to-receipt latency, next to the same receiver's
 * ceiling under a raw undici POST loop in the same run; then publishing at fixed rates.
 */
export async function benchWebhooks(server: ServerProcess, adminToken: string, postgresCpuMs: () => number): Promise<WebhookBench> {
  const admin = createClient({ address: server.grpcAddress, token: adminToken });
  const receiver = new BenchReceiver();
  const url = await receiver.listen();
  let raw: RawClient | undefined;
  try {
    const { account } = await admin.admin.createAccount({ name: "webhook-bench", groupIds: [] });
    const { key } = await admin.admin.createApiKey({
      accountId: account!.id,
      name: "webhook bench",
      scopes: ["webhooks", "events:publish"],
    });
    const api = createClient({ address: server.grpcAddress, token: key });
    try {
      for (let i = 0; i < WEBHOOKS; i++) {
        await api.webhooks.createWebhook({ url: `${url}?w=${i}`, events: ["request.completed"], secret: SECRET, description: "bench" });
      }
    } finally {
      api.close();
    }
    raw = new RawClient(server.grpcAddress, key);
    const client = raw;
    const request = PublishEventRequest.encode({ event: "request.completed", data: DATA, accountId: "", idempotencyKey: "" }).finish();
    const publish = () => client.call(METHOD, request);

    // The body and headers of one delivery, for the ceiling loop.
    const body = JSON.stringify({ event: "request.completed", timestamp: new Date().toISOString(), data: DATA });

    // Warm-up: connections, JIT, plans.
    receiver.reset();
    for (let i = 0; i < 200; i += 20) await Promise.all(Array.from({ length: 20 }, publish));
    await waitForDeliveries(receiver, 200 * WEBHOOKS);

    receiver.reset();
    const ceiling = await postLoop(receiver, url, body);

    const cpu = { server: () => server.cpuMs(), postgres: postgresCpuMs };
    const saturated = await deliveryRun(receiver, cpu, `closed loop, ${PUBLISHERS} publishers, backlog <= ${BACKLOG_CAP}`, async (stopAt, count) => {
      await Promise.all(
        Array.from({ length: PUBLISHERS }, async () => {
          while (Date.now() < stopAt) {
            if (count.published * WEBHOOKS - receiver.ids.size > BACKLOG_CAP) {
              await sleep(1);
              continue;
            }
            await count.track(publish());
          }
        }),
      );
    });

    const fixed: DeliveryRun[] = [];
    for (const rate of [500, 50]) {
      fixed.push(
        await deliveryRun(receiver, cpu, `${rate} events/s (${rate * WEBHOOKS} deliveries/s)`, async (stopAt, count) => {
          const started = performance.now();
          const inFlight = new Set<Promise<void>>();
          let sent = 0;
          while (Date.now() < stopAt) {
            if (count.published * WEBHOOKS - receiver.ids.size > rate * WEBHOOKS * MAX_BACKLOG_SECONDS) {
              count.sustained = false;
              break;
            }
            const due = Math.floor(((performance.now() - started) * rate) / 1000);
            while (sent < due && inFlight.size < MAX_IN_FLIGHT) {
              sent++;
              const call = count.track(publish());
              inFlight.add(call);
              void call.finally(() => inFlight.delete(call));
            }
            await sleep(1);
          }
          await Promise.all(inFlight);
        }),
      );
    }
    return { webhooks: WEBHOOKS, bodyBytes: Buffer.byteLength(body), ceiling, saturated, fixed };
  } finally {
    raw?.close();
    admin.close();
    await receiver.close();
  }
}

interface Counter {
  published: number;
  sustained: boolean;
  errors: number;
  firstError?: string;
  callLatencies: number[];
  track(call: Promise<unknown>): Promise<void>;
}

async function deliveryRun(
  receiver: BenchReceiver,
  cpu: { server: () => number; postgres: () => number },
  name: string,
  publisher: (stopAt: number, count: Counter) => Promise<void>,
): Promise<DeliveryRun> {
  receiver.reset();
  const count: Counter = {
    published: 0,
    sustained: true,
    errors: 0,
    callLatencies: [],
    track: (call) => {
      const t0 = performance.now();
      return call.then(
        () => {
          count.published++;
          count.callLatencies.push(performance.now() - t0);
        },
        (error: unknown) => {
          count.errors++;
          count.firstError ??= String(error);
        },
      );
    },
  };
  const cpuBefore = { server: cpu.server(), postgres: cpu.postgres(), bench: process.cpuUsage() };
  const started = performance.now();
  await publisher(Date.now() + DURATION_MS, count);
  const seconds = (performance.now() - started) / 1000;
  const deliveredWhilePublishing = receiver.ids.size;
  const drainStarted = performance.now();
  const drained = await waitForDeliveries(receiver, count.published * WEBHOOKS).then(
    () => true,
    () => false,
  );
  const drainMs = performance.now() - drainStarted;
  const cpuAfter = { server: cpu.server(), postgres: cpu.postgres(), bench: process.cpuUsage(cpuBefore.bench) };
  const perDelivery = (ms: number) => (ms * 1000) / Math.max(1, receiver.received);
  if (count.firstError) console.log(`    first publish error: ${count.firstError}`);
  if (receiver.badSignatures > 0) console.log(`    ${receiver.badSignatures} deliveries with a bad signature`);
  const latencies = receiver.latencies.toSorted((a, b) => a - b);
  const calls = count.callLatencies.toSorted((a, b) => a - b);
  return {
    name,
    seconds,
    published: count.published,
    publishErrors: count.errors,
    publishedPerSecond: count.published / seconds,
    deliveredPerSecond: deliveredWhilePublishing / seconds,
    delivered: receiver.ids.size,
    duplicates: receiver.duplicates,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
    maxMs: latencies.at(-1) ?? NaN,
    publishP50Ms: quantile(calls, 0.5),
    publishP99Ms: quantile(calls, 0.99),
    drainMs,
    drained,
    sustained: count.sustained,
    serverCpuUsPerDelivery: perDelivery(cpuAfter.server - cpuBefore.server),
    postgresCpuUsPerDelivery: perDelivery(cpuAfter.postgres - cpuBefore.postgres),
    benchCpuUsPerDelivery: perDelivery((cpuAfter.bench.user + cpuAfter.bench.system) / 1000),
  };
}

/** The receiver's ceiling: a raw undici POST loop in a worker thread, counted by the receiver. */
async function postLoop(receiver: BenchReceiver, url: string, body: string): Promise<WebhookBench["ceiling"]> {
  const headers = {
    "Content-Type": "application/json",
    "User-Agent": "Service-Webhook/1.0",
    "X-Webhook-Event": "request.completed",
    "X-Webhook-Timestamp": new Date().toISOString(),
    "X-Webhook-Id": "00000000-0000-4000-8000-000000000000",
    "X-Webhook-Signature": signBody(SECRET, body),
  };
  const worker = new Worker(new URL("./post-loop.js", import.meta.url), {
    workerData: { url: `${url}?w=ceiling`, body, headers, concurrency: CEILING_CONCURRENCY, durationMs: DURATION_MS },
  });
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  const result = await new Promise<{ requests: number; errors: number; firstError?: string }>((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
  });
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  await worker.terminate();
  return {
    perSecond: receiver.received / seconds,
    requests: receiver.received,
    errors: result.errors,
    firstError: result.firstError,
    cpuUsPerRequest: (cpu.user + cpu.system) / Math.max(1, receiver.received),
  };
}

/** Waits until `count` distinct deliveries have arrived, or none has for STALL_MS. */
async function waitForDeliveries(receiver: BenchReceiver, count: number): Promise<void> {
  let seen = receiver.ids.size;
  let progressAt = Date.now();
  while (receiver.ids.size < count) {
    if (receiver.ids.size !== seen) {
      seen = receiver.ids.size;
      progressAt = Date.now();
    } else if (Date.now() - progressAt > STALL_MS) {
      throw new Error(`received ${receiver.ids.size} of ${count} deliveries`);
    }
    await sleep(5);
  }
}
