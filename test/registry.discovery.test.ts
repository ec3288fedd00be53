import { beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, useTwoReplicas, type TestApp } from "./support/app.js";
import { query } from "./support/database.js";
import { failure, until } from "./support/expect.js";
import { gauge } from "./support/streams.js";

let databaseUrl: string;
let a: TestApp;
let b: TestApp;

// Two replicas, each listing from its own memory; a short check interval so a change no notice
// announced shows within a test.
useTwoReplicas({ CACHE_CHECK_MS: "300" }, (replicas) => ({ a, b, databaseUrl } = replicas));

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

  it("follow heartbeats on the other replica within a flush", async () => {
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
    await query(databaseUrl, "update instances set weight = 3 where id = $1", [instance!.id]);
    await until(async () => (await b.admin.registry.listInstances({ namespace: "silent", service: "api" })).instances[0]!.weight === 3, 3_000, "the unannounced change to show");
  });

  it("answer over HTTP from the same memory", async () => {
    const listed = await b.http("GET", "/v1/namespaces/mem/services/api/instances?healthy_only=true", { token: ADMIN_TOKEN });
    expect(listed.status).toBe(200);
    expect(listed.body.instances).toHaveLength(19);
  });
});

describe("blocking queries", () => {
  const list = (t: TestApp, query = "") => t.http("GET", `/v1/namespaces/block/services/api/instances${query}`, { token: ADMIN_TOKEN });

  // Every test here lists the service "api" of namespace "block", which starts with one instance.
  beforeAll(async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "block" } });
    await a.admin.registry.registerInstance({ namespace: "block", service: "api", host: "h", port: 1, ttlSeconds: 60 });
  });

  it("answer as soon as the index passes the caller's, with the new list and index", async () => {
    // The other replica's index follows the registration once the change feed's notice arrives (a
    // write does not wait for it; its list, which the write does wait for, may show the change first).
    let index = 0;
    await until(async () => (index = Number((await list(b)).headers.get("x-atrium-index"))) > 0);

    // Waits up to 300 s; the registration on the other replica wakes it.
    const blocked = list(b, `?index=${index}&wait=300s`);
    let answered = false;
    void blocked.then(() => (answered = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBe(false);
    // A change to another service of the namespace does not wake it.
    await a.admin.registry.registerInstance({ namespace: "block", service: "other", host: "h", port: 1, ttlSeconds: 60 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBe(false);
    await a.admin.registry.registerInstance({ namespace: "block", service: "api", host: "h", port: 2, ttlSeconds: 60 });
    const woken = await blocked;
    expect(woken.status).toBe(200);
    expect(woken.body.instances.map((i: { port: number }) => i.port)).toEqual([1, 2]);
    expect(Number(woken.headers.get("x-atrium-index"))).toBeGreaterThan(index);

    // ListServices blocks on the whole namespace.
    const services = await b.http("GET", "/v1/namespaces/block/services", { token: ADMIN_TOKEN });
    const servicesIndex = Number(services.headers.get("x-atrium-index"));
    const blockedServices = b.http("GET", `/v1/namespaces/block/services?index=${servicesIndex}&wait=300s`, { token: ADMIN_TOKEN });
    await a.admin.registry.registerInstance({ namespace: "block", service: "third", host: "h", port: 1, ttlSeconds: 60 });
    expect((await blockedServices).body.services.map((s: { name: string }) => s.name)).toEqual(["api", "other", "third"]);
  });

  it("block on index 0 until the first service of a namespace that never had one", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "fresh" } });
    const services = (query = "") => b.http("GET", `/v1/namespaces/fresh/services${query}`, { token: ADMIN_TOKEN });
    const empty = await services();
    expect(empty.headers.get("x-atrium-index")).toBe("0");
    // Sent back as a client would, the index 0 blocks until something happens.
    const blocked = services("?index=0&wait=300s");
    let answered = false;
    void blocked.then(() => (answered = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(answered).toBe(false);
    await a.admin.registry.registerInstance({ namespace: "fresh", service: "first", host: "h", port: 1, ttlSeconds: 60 });
    const woken = await blocked;
    expect(woken.status).toBe(200);
    expect(woken.body.services.map((s: { name: string }) => s.name)).toEqual(["first"]);
    expect(Number(woken.headers.get("x-atrium-index"))).toBeGreaterThan(0);
  });

  it("wake a blocking ListServices when a service with no instances is deleted on the other replica", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "emptied" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "emptied", service: "gone", host: "h", port: 1, ttlSeconds: 60 });
    await a.admin.registry.registerInstance({ namespace: "emptied", service: "kept", host: "h", port: 1, ttlSeconds: 60 });
    await a.admin.registry.deregisterInstance({ namespace: "emptied", service: "gone", instanceId: instance!.id });
    const services = (query = "") => b.http("GET", `/v1/namespaces/emptied/services${query}`, { token: ADMIN_TOKEN });
    const before = await services();
    expect(before.body.services.map((s: { name: string }) => s.name)).toEqual(["gone", "kept"]);

    // As a client would: block on the last index until the list changes. An index that lags the
    // writes above (this replica hears of them a moment later) wakes at once with the same list.
    const started = Date.now();
    const deletion = new Promise((resolve) => setTimeout(resolve, 200)).then(() =>
      a.admin.registry.deleteService({ namespace: "emptied", service: "gone" }),
    );
    let asked = Number(before.headers.get("x-atrium-index"));
    let answer = await services(`?index=${asked}&wait=20s`);
    while (answer.body.services.length === 2) {
      asked = Number(answer.headers.get("x-atrium-index"));
      answer = await services(`?index=${asked}&wait=20s`);
    }
    await deletion;
    expect(answer.body.services.map((s: { name: string }) => s.name)).toEqual(["kept"]);
    expect(Number(answer.headers.get("x-atrium-index"))).toBeGreaterThan(asked);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("free the waiting query when a gRPC caller cancels it", async () => {
    const index = Number((await list(b)).headers.get("x-atrium-index"));
    const watchers = () => gauge(b, "atrium_registry_watchers", ADMIN_TOKEN);
    const before = await watchers();
    const controller = new AbortController();
    const blocked = b.admin.registry.listInstances(
      { namespace: "block", service: "api", index, wait: { seconds: 300, nanos: 0 } },
      { signal: controller.signal },
    );
    await until(async () => (await watchers()) === before + 1);
    controller.abort();
    expect((await failure(blocked)).code).toBe(Code.CANCELLED);
    await until(async () => (await watchers()) === before);
  });

  it("end UNAUTHENTICATED when their key is revoked on the other replica, or expires, while they wait", async () => {
    const index = Number((await list(b)).headers.get("x-atrium-index"));
    const user = await createAccountWithKey(a, ["namespaces"]);
    const blocked = b.http("GET", `/v1/namespaces/block/services/api/instances?index=${index}&wait=300s`, { token: user.key });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await a.admin.admin.revokeApiKey({ keyId: user.keyId });
    const revoked = await blocked;
    expect(revoked.status).toBe(401);
    expect(revoked.body.details.find((d: { reason?: string }) => d.reason).reason).toBe("API_KEY_REVOKED");

    const expireTime = new Date(Date.now() + 1_500);
    const { key } = await a.admin.admin.createApiKey({ accountId: user.accountId, name: "brief", scopes: ["namespaces"], expireTime });
    const expired = await failure(b.client(key).registry.listInstances({ namespace: "block", service: "api", index, wait: { seconds: 300, nanos: 0 } }));
    expect(expired.code).toBe(Code.UNAUTHENTICATED);
    expect(expired.reason).toBe("API_KEY_EXPIRED");
    expect(Date.now() - expireTime.getTime()).toBeLessThan(2_000);
  });

  it("answer at once, with the list as it is, when their replica shuts down", async () => {
    const c = await startTestApp(databaseUrl, { CACHE_CHECK_MS: "300" });
    const index = Number((await list(c)).headers.get("x-atrium-index"));
    const blocked = list(c, `?index=${index}&wait=300s`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = Date.now();
    const [answer] = await Promise.all([blocked, c.app.stop()]);
    expect(answer.status).toBe(200);
    expect(answer.headers.get("x-atrium-index")).toBe(String(index));
    // Not the shutdown's grace period (10 s): nothing else held it.
    expect(Date.now() - started).toBeLessThan(3_000);
    await c.stop();
  });

  it("answer at the end of the wait with the same list and index when nothing changed", async () => {
    const now = await list(a);
    const index = now.headers.get("x-atrium-index");
    const waited = await list(a, `?index=${index}&wait=0.5s`);
    expect(waited.status).toBe(200);
    expect(waited.headers.get("x-atrium-index")).toBe(index);
    expect(waited.body).toEqual(now.body);
  });

  it.each([
    ["?index=1&wait=soon", "wait"],
    ["?index=1&wait=601s", "wait"],
    ["?index=1&wait=-1s", "wait"],
    ["?index=-1&wait=1s", "index"],
    ["?index=x&wait=1s", "index"],
  ])("refuse %s naming %s", async (query, field) => {
    const bad = await list(a, query);
    expect(bad.status).toBe(400);
    expect(bad.body.details[0].field_violations.map((v: { field: string }) => v.field)).toEqual([field]);
  });
});
