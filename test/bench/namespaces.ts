import { HealthCheckRequest } from "../../gen/health/v1/health.js";
import {
  CreateNamespaceRequest,
  GetNamespaceRequest,
  ListNamespacesRequest,
} from "../../gen/v1/namespace_service.js";
import { createClient } from "../../src/client/index.js";
import { runInterleaved, runLoad, type LoadResult } from "./load.js";
import { RawClient } from "./raw-client.js";
import type { ServerProcess } from "./server-process.js";

const CONCURRENCY = 64;
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 10_000);
const SEEDED = 1_000;
/** Turns of the no-op and GetNamespace. */
const SLICES = 10;

export interface NamespaceBench {
  results: LoadResult[];
  memory: { rssMiB: number; peakMiB: number };
}

/**
 * GetNamespace, ListNamespaces and CreateNamespace at concurrency 64, next to a no-op RPC (the
 * health check, which skips our interceptors and the database) on the same server in the same run.
 */
export async function benchNamespaces(server: ServerProcess, adminToken: string): Promise<NamespaceBench> {
  const client = createClient({ address: server.grpcAddress, token: adminToken });
  const raw = new RawClient(server.grpcAddress, adminToken);
  try {
    for (let i = 0; i < SEEDED; i += 100) {
      await client.namespaces.batchCreateNamespaces({
        namespaces: Array.from({ length: 100 }, (_, j) => ({
          name: `bench-${i + j}`,
          comment: "seeded by make bench",
          metadata: { team: `t${(i + j) % 10}` },
        })),
      });
    }
    const options = { concurrency: CONCURRENCY, durationMs: DURATION_MS, cpuMs: server.cpuMs };
    const health = HealthCheckRequest.encode({ service: "" }).finish();
    const gets = Array.from({ length: SEEDED }, (_, i) => GetNamespaceRequest.encode({ name: `bench-${i}` }).finish());
    const list = ListNamespacesRequest.encode(ListNamespacesRequest.fromPartial({ name: ["bench-1*"] })).finish();
    const run = Date.now().toString(36);

    // GetNamespace's target is a ratio to the no-op: the two take turns (see runInterleaved).
    const results: LoadResult[] = await runInterleaved(
      [
        { name: "no-op (grpc.health.v1.Health/Check)", call: () => raw.call("/grpc.health.v1.Health/Check", health) },
        { name: "GetNamespace", call: (i) => raw.call("/v1.NamespaceService/GetNamespace", gets[(i * 7919) % SEEDED]!) },
      ],
      { ...options, slices: SLICES },
    );
    results.push(
      await runLoad("ListNamespaces (name=bench-1*, limit 100)", () => raw.call("/v1.NamespaceService/ListNamespaces", list), options),
    );
    results.push(
      await runLoad(
        "CreateNamespace",
        (i) =>
          raw.call(
            "/v1.NamespaceService/CreateNamespace",
            CreateNamespaceRequest.encode(
              CreateNamespaceRequest.fromPartial({ namespace: { name: `c-${run}-${i}`, comment: "bench" } }),
            ).finish(),
          ),
        options,
      ),
    );
    return { results, memory: server.memory() };
  } finally {
    client.close();
    raw.close();
  }
}
