import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { failure, until } from "./support/expect.js";

let databaseUrl: string;
let a: TestApp;
let b: TestApp;

// Two replicas, each listing from its own memory; a short check interval so a change no notice
// announced shows within a test.
const env = { CACHE_CHECK_MS: "300" };

beforeAll(async () => {
  databaseUrl = await createTestDatabase();
  a = await startTestApp(databaseUrl, env);
  b = await startTestApp(databaseUrl, env);
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
});

async function ports(t: TestApp, namespace: string, service: string, healthyOnly = false): Promise<number[]> {
  const { instances } = await t.admin.registry.listInstances({ namespace, service, healthyOnly });
  return instances.map((i) => i.port);
}

describe("ListInstances and ListServices from memory", () => {
  it("show every write made on the other replica as soon as the write returns", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "mem" } });
    expect((await failure(b.admin.registry.listInstances({ namespace: "mem", service: "api" }))).code).toBe(Code.NOT_FOUND);
    const first = (await a.admin.registry.registerInstance({ namespace: "mem", service: "api", host: "h", port: 1, ttlSeconds: 60 })).instance!;
    // b now holds the namespace in memory; each later write must still show there at once.
    for (let port = 2; port <= 20; port++) {
      await a.admin.registry.registerInstance({ namespace: "mem", service: "api", host: "h", port, ttlSeconds: 60 });
      expect(await ports(b, "mem", "api")).toHaveLength(port);
    }
    await b.admin.registry.updateInstance({ namespace: "mem", service: "api", instanceId: first.id, isolate: true, updateMask: ["isolate"] });
    expect(await ports(a, "mem", "api", true)).not.toContain(1);
    await a.admin.registry.deregisterInstance({ namespace: "mem", service: "api", instanceId: first.id });
    expect(await ports(b, "mem", "api")).not.toContain(1);

    const { services, amount } = await b.admin.registry.listServices({ namespace: "mem", limit: 1 });
    expect(amount).toBe(1);
    expect(services[0]).toMatchObject({ name: "api", instanceCount: 19, healthyInstanceCount: 19 });
    await a.admin.registry.registerInstance({ namespace: "mem", service: "zeta", host: "h", port: 1, ttlSeconds: 60 });
    expect((await b.admin.registry.listServices({ namespace: "mem", offset: 1 })).services.map((s) => s.name)).toEqual(["zeta"]);
    await a.admin.registry.deleteService({ namespace: "mem", service: "zeta" });
    expect((await b.admin.registry.listServices({ namespace: "mem" })).services.map((s) => s.name)).toEqual(["api"]);
  });

  it("follow heartbeats on the other replica within a batch", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "beats" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "beats", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const before = (await b.admin.registry.listInstances({ namespace: "beats", service: "api" })).instances[0]!.lastHeartbeatTime!;
    await new Promise((resolve) => setTimeout(resolve, 20));
    await a.admin.registry.heartbeat({ namespace: "beats", service: "api", instanceId: instance!.id });
    await until(async () => {
      const now = (await b.admin.registry.listInstances({ namespace: "beats", service: "api" })).instances[0]!.lastHeartbeatTime!;
      return now.getTime() > before.getTime();
    }, 2_000, "the heartbeat to show on the other replica");
  });

  it("pick up a change no notice announced at the next check", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "silent" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "silent", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    expect((await b.admin.registry.listInstances({ namespace: "silent", service: "api" })).instances[0]!.weight).toBe(100);
    // A writer that died between its commit and its notice, as seen from the replicas.
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    await client.query("update instances set weight = 3 where id = $1", [instance!.id]);
    await client.end();
    await until(async () => (await b.admin.registry.listInstances({ namespace: "silent", service: "api" })).instances[0]!.weight === 3, 3_000, "the unannounced change to show");
  });

  it("answer over HTTP from the same memory", async () => {
    const listed = await b.http("GET", "/v1/namespaces/mem/services/api/instances?healthy_only=true", { token: ADMIN_TOKEN });
    expect(listed.status).toBe(200);
    expect(listed.body.instances).toHaveLength(19);
  });
});
