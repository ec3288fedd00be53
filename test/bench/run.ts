import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { startEmbeddedPostgres } from "../../src/platform/db/embedded-postgres.js";
import { createLogger } from "../../src/platform/logger.js";
import type { LoadResult } from "./load.js";
import { benchNamespaces } from "./namespaces.js";
import { benchRegistry, HEARTBEATS_PER_BATCH } from "./registry.js";
import { startServerProcess } from "./server-process.js";

const ADMIN_TOKEN = "bench-admin-token-0123456789";

/**
 * `make bench`: the service as its own process on a private, durable PostgreSQL; every figure is
 * printed next to a baseline measured in the same run, as a ratio.
 */
async function main(): Promise<void> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "atrium-bench-"));
  await fs.chmod(dir, 0o755);
  const pg = await startEmbeddedPostgres(dir, createLogger("warn"));
  const server = await startServerProcess(
    { DATABASE_URL: pg.url, ADMIN_TOKEN, LOG_LEVEL: process.env.LOG_LEVEL ?? "info", DATABASE_POOL_SIZE: "20" },
    path.join(os.tmpdir(), "atrium-bench-server.log"),
  );
  try {
    console.log(`machine: ${os.cpus().length} cores, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
    console.log("\n== namespaces (grpc-js client, concurrency 64) ==");
    const ns = await benchNamespaces(server, ADMIN_TOKEN);
    printTable(ns.results, ns.results[0]!);
    console.log(`server RSS ${ns.memory.rssMiB.toFixed(0)} MiB (peak ${ns.memory.peakMiB.toFixed(0)} MiB); log: ${server.logFile}`);
    const get = ns.results.find((r) => r.name === "GetNamespace")!;
    const create = ns.results.find((r) => r.name === "CreateNamespace")!;
    const noop = ns.results[0]!;
    check("GetNamespace >= 70% of the no-op's requests/s", get.perSecond / noop.perSecond >= 0.7);
    check("GetNamespace p99 < 20 ms", get.p99Ms < 20);
    check("CreateNamespace >= 1,500/s", create.perSecond >= 1500);

    console.log("\n== registry: services and instances (grpc-js client, concurrency 64) ==");
    const registry = await benchRegistry(server, ADMIN_TOKEN);
    printTable(registry, registry[0]!);
    const [, single, batched, list, listHealthy] = registry;
    const batchedPerSecond = batched!.perSecond * HEARTBEATS_PER_BATCH;
    console.log(
      `heartbeats/s: ${single!.perSecond.toFixed(0)} one per call, ${batchedPerSecond.toFixed(0)} in batches of ${HEARTBEATS_PER_BATCH}`,
    );
    check("heartbeats >= 5,000/s with 10,000 instances (one per call)", single!.perSecond >= 5000);
    check("heartbeats >= 5,000/s with 10,000 instances (batched)", batchedPerSecond >= 5000);
    console.log(`ListInstances p99 ${list!.p99Ms.toFixed(2)} ms, healthy_only p99 ${listHealthy!.p99Ms.toFixed(2)} ms`);
  } finally {
    await server.stop();
    await pg.stop();
    await fs.rm(dir, { recursive: true, force: true });
  }
}

function printTable(results: LoadResult[], baseline: LoadResult): void {
  console.log(
    [
      "scenario".padEnd(44),
      "req/s".padStart(9),
      "ratio".padStart(7),
      "p50 ms".padStart(8),
      "p99 ms".padStart(8),
      "srv CPU µs/call".padStart(16),
      "cpu ratio".padStart(10),
      "errors".padStart(7),
    ].join(" "),
  );
  for (const r of results) {
    console.log(
      [
        r.name.padEnd(44),
        r.perSecond.toFixed(0).padStart(9),
        (r.perSecond / baseline.perSecond).toFixed(2).padStart(7),
        r.p50Ms.toFixed(2).padStart(8),
        r.p99Ms.toFixed(2).padStart(8),
        (r.serverCpuUs?.toFixed(0) ?? "-").padStart(16),
        (r.serverCpuUs && baseline.serverCpuUs ? (r.serverCpuUs / baseline.serverCpuUs).toFixed(2) : "-").padStart(10),
        String(r.errors).padStart(7),
      ].join(" "),
    );
    if (r.firstError) console.log(`    first error: ${r.firstError}`);
  }
}

function check(target: string, met: boolean): void {
  console.log(`${met ? "MET    " : "NOT MET"}  ${target}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
