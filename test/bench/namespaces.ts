import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { protoPath as healthProtoPath } from "grpc-health-check";
import { createClient } from "../../src/client/index.js";
import { runLoad, type LoadResult } from "./load.js";
import type { ServerProcess } from "./server-process.js";

const CONCURRENCY = 64;
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 10_000);
const SEEDED = 1_000;

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
  const health = healthClient(server.grpcAddress);
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
    const options = { concurrency: CONCURRENCY, durationMs: DURATION_MS };
    const results: LoadResult[] = [];
    results.push(
      await runLoad(
        "no-op (grpc.health.v1.Health/Check)",
        () => new Promise((resolve, reject) => health.Check({ service: "" }, (e: unknown, r: unknown) => (e ? reject(e) : resolve(r)))),
        options,
      ),
    );
    results.push(
      await runLoad("GetNamespace", (i) => client.namespaces.getNamespace({ name: `bench-${(i * 7919) % SEEDED}` }), options),
    );
    results.push(
      await runLoad("ListNamespaces (name=bench-1*, limit 100)", () => client.namespaces.listNamespaces({ name: ["bench-1*"] }), options),
    );
    const run = Date.now().toString(36);
    results.push(
      await runLoad(
        "CreateNamespace",
        (i) => client.namespaces.createNamespace({ namespace: { name: `c-${run}-${i}`, comment: "bench" } }),
        options,
      ),
    );
    return { results, memory: server.memory() };
  } finally {
    client.close();
    health.close();
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function healthClient(address: string): any {
  const definition = protoLoader.loadSync(healthProtoPath, { keepCase: true });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const pkg = grpc.loadPackageDefinition(definition) as any;
  return new pkg.grpc.health.v1.Health(address, grpc.credentials.createInsecure());
}
