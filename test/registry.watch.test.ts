import { describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { InstanceChangeKind, type WatchInstancesResponse } from "../gen/v1/registry_service.js";
import { Namespace } from "../gen/v1/namespace.js";
import { loadConfig } from "../src/config.js";
import { namespacesModule } from "../src/namespaces/module.js";
import { createDb } from "../src/platform/db/database.js";
import { Notifications } from "../src/platform/db/notifications.js";
import { createLogger } from "../src/platform/logger.js";
import { Metrics } from "../src/platform/metrics.js";
import { SsrfGuard } from "../src/platform/ssrf.js";
import { ChangeFeed } from "../src/registry/change-feed.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, useTwoReplicas, type TestApp } from "./support/app.js";
import { query } from "./support/database.js";
import { gauge, streamReader } from "./support/streams.js";
import { until } from "./support/expect.js";

let databaseUrl: string;
let a: TestApp;
let b: TestApp;

// Two replicas on one database; a short sweep so expiry shows within a test, and few kept changes
// with a quick prune so that a resume can be too old.
const env = { INSTANCE_EXPIRY_SWEEP_MS: "100", REGISTRY_CHANGES_KEPT: "20", CACHE_CHECK_MS: "200" };

useTwoReplicas(env, (replicas) => ({ a, b, databaseUrl } = replicas));

async function watchers(t: TestApp): Promise<number> {
  return gauge(t, "atrium_registry_watchers", ADMIN_TOKEN);
}

function kindOf(message: WatchInstancesResponse): InstanceChangeKind | undefined {
  return message.change?.kind;
}

describe("WatchInstances", () => {
  it("starts with the list, then sends every change made on any replica, and nothing for plain heartbeats", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "watched" } });
    const first = await a.admin.registry.registerInstance({ namespace: "watched", service: "api", host: "10.0.0.1", port: 80, ttlSeconds: 60 });

    const watch = streamReader(b.admin.registry.watchInstances({ namespace: "watched", service: "api" }));
    const snapshot = await watch.next();
    expect(snapshot.snapshot).toBe(true);
    expect(snapshot.instances.map((i) => i.id)).toEqual([first.instance!.id]);
    let revision = snapshot.revision;
    const expectNext = async (kind: InstanceChangeKind) => {
      const message = await watch.next();
      expect(message.snapshot).toBe(false);
      expect(kindOf(message)).toBe(kind);
      expect(message.revision).toBeGreaterThan(revision);
      revision = message.revision;
      return message.change!.instance!;
    };

    // A heartbeat that changes nothing sends nothing: the next message is the registration after it.
    await a.admin.registry.heartbeat({ namespace: "watched", service: "api", instanceId: first.instance!.id });
    const second = await a.admin.registry.registerInstance({ namespace: "watched", service: "api", host: "10.0.0.2", port: 80, ttlSeconds: 1 });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED)).id).toBe(second.instance!.id);

    await a.admin.registry.updateInstance({ namespace: "watched", service: "api", instanceId: first.instance!.id, weight: 7, updateMask: ["weight"] });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_UPDATED)).weight).toBe(7);
    // The same weight again changes nothing.
    await a.admin.registry.updateInstance({ namespace: "watched", service: "api", instanceId: first.instance!.id, weight: 7, updateMask: ["weight"] });
    await b.admin.registry.updateInstance({ namespace: "watched", service: "api", instanceId: first.instance!.id, isolate: true, updateMask: ["isolate"] });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED)).isolate).toBe(true);

    // The 1 s TTL runs out; whichever replica's sweeper finds it, the watcher hears.
    const expired = await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_EXPIRED);
    expect(expired).toMatchObject({ id: second.instance!.id, healthy: false });
    await a.admin.registry.heartbeat({ namespace: "watched", service: "api", instanceId: second.instance!.id });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_REVIVED)).healthy).toBe(true);
    await a.admin.registry.deregisterInstance({ namespace: "watched", service: "api", instanceId: second.instance!.id });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_DEREGISTERED)).id).toBe(second.instance!.id);

    await a.admin.registry.deleteService({ namespace: "watched", service: "api" });
    expect((await expectNext(InstanceChangeKind.INSTANCE_CHANGE_KIND_DEREGISTERED)).id).toBe(first.instance!.id);
    watch.cancel();
  });

  it("resumes from a revision with exactly the changes missed, or a fresh list when they are gone", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "resume" } });
    const watch = streamReader(a.admin.registry.watchInstances({ namespace: "resume", service: "api" }));
    const start = await watch.next();
    expect(start).toMatchObject({ snapshot: true, instances: [] });
    watch.cancel();

    const made = [];
    for (const port of [1, 2, 3]) {
      made.push((await b.admin.registry.registerInstance({ namespace: "resume", service: "api", host: "h", port, ttlSeconds: 60 })).instance!);
    }
    // Changes to other services in between are not sent.
    await b.admin.registry.registerInstance({ namespace: "resume", service: "other", host: "h", port: 9, ttlSeconds: 60 });

    const resumed = streamReader(b.admin.registry.watchInstances({ namespace: "resume", service: "api", revision: start.revision }));
    const missed = [await resumed.next(), await resumed.next(), await resumed.next()];
    expect(missed.map((m) => [m.snapshot, kindOf(m), m.change!.instance!.id])).toEqual(
      made.map((i) => [false, InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED, i.id]),
    );
    const last = missed[2]!.revision;
    // Live changes follow the missed ones on the same stream.
    await a.admin.registry.updateInstance({ namespace: "resume", service: "api", instanceId: made[0]!.id, weight: 1, updateMask: ["weight"] });
    expect(kindOf(await resumed.next())).toBe(InstanceChangeKind.INSTANCE_CHANGE_KIND_UPDATED);
    resumed.cancel();

    // Only the newest 20 changes are kept: after 25 more, the old revision gets the whole list.
    for (let port = 10; port < 35; port++) {
      await a.admin.registry.registerInstance({ namespace: "resume", service: "filler", host: "h", port, ttlSeconds: 60 });
    }
    let fresh: WatchInstancesResponse | undefined;
    await until(async () => {
      const again = streamReader(a.admin.registry.watchInstances({ namespace: "resume", service: "api", revision: last }));
      fresh = await again.next();
      again.cancel();
      return fresh.snapshot;
    }, 10_000, "the old changes to be pruned");
    expect(fresh!.instances.map((i) => i.port).sort()).toEqual([1, 2, 3]);
    expect(fresh!.revision).toBeGreaterThan(last);
  });

  it("ends with UNAUTHENTICATED when the watching token is rotated, NOT_FOUND when the namespace is deleted", async () => {
    const home = (await a.admin.namespaces.createNamespace({ namespace: { name: "tokenwatch" } })).namespace!;
    const asHome = streamReader(b.client(home.token!).registry.watchInstances({ namespace: "tokenwatch", service: "api" }));
    expect((await asHome.next()).snapshot).toBe(true);
    await a.admin.namespaces.updateNamespaceToken({ name: "tokenwatch" });
    const rotated = await asHome.end();
    expect(rotated.code).toBe(Code.UNAUTHENTICATED);
    expect(rotated.reason).toBe("INVALID_NAMESPACE_TOKEN");

    await a.admin.namespaces.createNamespace({ namespace: { name: "doomed" } });
    const onDoomed = streamReader(b.admin.registry.watchInstances({ namespace: "doomed", service: "api" }));
    expect((await onDoomed.next()).snapshot).toBe(true);
    await a.admin.namespaces.deleteNamespace({ name: "doomed" });
    const deleted = await onDoomed.end();
    expect(deleted.code).toBe(Code.NOT_FOUND);
    expect(deleted.reason).toBe("NAMESPACE_NOT_FOUND");
  });

  it("ends with NOT_FOUND when its namespace is deleted without a notice, once the replica's periodic check finds it", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "silent" } });
    const onSilent = streamReader(b.admin.registry.watchInstances({ namespace: "silent", service: "api" }));
    expect((await onSilent.next()).snapshot).toBe(true);
    // As a writer that died between its commit and its notice would leave it.
    await query(databaseUrl, "delete from namespaces where name = 'silent'");
    const ended = await onSilent.end();
    expect(ended.code).toBe(Code.NOT_FOUND);
    expect(ended.reason).toBe("NAMESPACE_NOT_FOUND");
  });

  it("with healthy_only, sends changes of instances in its list, entering it or leaving it, and nothing of the others", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "healthywatch" } });
    const at = { namespace: "healthywatch", service: "api" };
    const steady = await a.admin.registry.registerInstance({ ...at, host: "10.0.1.1", port: 80, ttlSeconds: 600 });
    const healthy = streamReader(b.admin.registry.watchInstances({ ...at, healthyOnly: true }));
    const all = streamReader(b.admin.registry.watchInstances(at));
    expect((await healthy.next()).instances.map((i) => i.id)).toEqual([steady.instance!.id]);
    expect((await all.next()).snapshot).toBe(true);
    let lastRevision = 0;
    const next = async (watch: typeof healthy, kind: InstanceChangeKind) => {
      const message = await watch.next();
      expect(kindOf(message)).toBe(kind);
      lastRevision = message.revision;
      return message.change!.instance!;
    };
    const steadyId = steady.instance!.id;

    // Isolated: it leaves the healthy list; changes to it meanwhile are not the healthy watcher's business.
    await a.admin.registry.updateInstance({ ...at, instanceId: steadyId, isolate: true, updateMask: ["isolate"] });
    expect((await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED)).isolate).toBe(true);
    await a.admin.registry.updateInstance({ ...at, instanceId: steadyId, weight: 9, updateMask: ["weight"] });
    await a.admin.registry.updateInstance({ ...at, instanceId: steadyId, isolate: false, updateMask: ["isolate"] });
    expect(await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED)).toMatchObject({ id: steadyId, isolate: false, weight: 9 });

    // Expired: it leaves; a weight change while expired is not sent; revived, it comes back.
    const brief = await a.admin.registry.registerInstance({ ...at, host: "10.0.1.2", port: 80, ttlSeconds: 1 });
    const briefId = brief.instance!.id;
    expect((await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED)).id).toBe(briefId);
    expect((await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_EXPIRED)).id).toBe(briefId);
    await a.admin.registry.updateInstance({ ...at, instanceId: briefId, weight: 3, updateMask: ["weight"] });
    await a.admin.registry.heartbeat({ ...at, instanceId: briefId });
    expect(await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_REVIVED)).toMatchObject({ id: briefId, weight: 3, healthy: true });
    await a.admin.registry.deregisterInstance({ ...at, instanceId: briefId });
    expect((await next(healthy, InstanceChangeKind.INSTANCE_CHANGE_KIND_DEREGISTERED)).id).toBe(briefId);

    // The unfiltered watcher saw every one of those changes, the two skipped ones included.
    const kinds: InstanceChangeKind[] = [];
    for (let i = 0; i < 8; i++) kinds.push(kindOf(await all.next())!);
    expect(kinds).toEqual([
      InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_UPDATED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_ISOLATION_CHANGED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_EXPIRED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_UPDATED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_REVIVED,
      InstanceChangeKind.INSTANCE_CHANGE_KIND_DEREGISTERED,
    ]);

    // Resuming with healthy_only starts from a fresh list of the healthy instances.
    const resumed = streamReader(b.admin.registry.watchInstances({ ...at, healthyOnly: true, revision: lastRevision }));
    const fresh = await resumed.next();
    expect(fresh.snapshot).toBe(true);
    expect(fresh.instances.map((i) => i.id)).toEqual([steadyId]);
    resumed.cancel();
    healthy.cancel();
    all.cancel();
  });

  it("ends with UNAUTHENTICATED when its API key is revoked on another replica; streams of other keys go on", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "keywatch" } });
    const revoked = await createAccountWithKey(a, ["namespaces"]);
    const kept = await createAccountWithKey(a, ["namespaces"]);
    const instances = streamReader(b.client(revoked.key).registry.watchInstances({ namespace: "keywatch", service: "api" }));
    const namespaces = streamReader(b.client(revoked.key).namespaces.watchNamespaces({}));
    const other = streamReader(b.client(kept.key).registry.watchInstances({ namespace: "keywatch", service: "api" }));
    for (const watch of [instances, namespaces, other]) expect((await watch.next()).snapshot).toBe(true);

    await a.admin.admin.revokeApiKey({ keyId: revoked.keyId });
    for (const ended of await Promise.all([instances.end(), namespaces.end()])) {
      expect(ended.code).toBe(Code.UNAUTHENTICATED);
      expect(ended.reason).toBe("API_KEY_REVOKED");
    }
    await a.admin.registry.registerInstance({ namespace: "keywatch", service: "api", host: "10.0.0.9", port: 80, ttlSeconds: 60 });
    expect(kindOf(await other.next())).toBe(InstanceChangeKind.INSTANCE_CHANGE_KIND_REGISTERED);
    other.cancel();
    await until(async () => (await watchers(b)) === 0, 5_000, "the ended streams to be freed");
  });

  it("ends with UNAUTHENTICATED when its API key expires", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "expiring" } });
    const user = await createAccountWithKey(a, ["namespaces"]);
    const expireTime = new Date(Date.now() + 1_500);
    const { key } = await a.admin.admin.createApiKey({ accountId: user.accountId, name: "brief", scopes: ["namespaces"], expireTime });
    const watch = streamReader(b.client(key).registry.watchInstances({ namespace: "expiring", service: "api" }));
    expect((await watch.next()).snapshot).toBe(true);
    const ended = await watch.end();
    expect(ended.code).toBe(Code.UNAUTHENTICATED);
    expect(ended.reason).toBe("API_KEY_EXPIRED");
    expect(Date.now() - expireTime.getTime()).toBeLessThan(2_000);
  });

  it("re-checks a watcher's access once per change made on its own replica, as for a change made on another", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "rechecked" } });
    // A replica of its own, with only the parts that decide when a watcher's access is checked again.
    const logger = createLogger("silent");
    const config = loadConfig({ DATABASE_URL: databaseUrl, ADMIN_TOKEN });
    const db = createDb(databaseUrl, 2, logger);
    const notifications = new Notifications(databaseUrl, logger);
    const metrics = new Metrics();
    const { cache, service } = namespacesModule({ config, logger, db, notifications, metrics, guard: new SsrfGuard({ allowPrivate: true }) });
    const feed = new ChangeFeed({ db, notifications, namespaces: cache, logger, metrics, checkMs: 60_000, kept: 100 });
    await notifications.start();
    const checks: string[] = [];
    const stop = feed.subscribe({
      namespace: "rechecked",
      service: "api",
      guards: ["rechecked"],
      onChange: () => undefined,
      onNamespaceChanged: (name) => checks.push(name),
    });
    try {
      const admin = { accountId: "", keyId: "test", scopes: new Set(["admin"] as const), groupIds: [] };
      // The update returns once every replica, this one included, has taken its notice.
      await service.update(admin, Namespace.fromPartial({ name: "rechecked", comment: "here" }), ["comment"]);
      expect(checks).toEqual(["rechecked"]);
      await a.admin.namespaces.updateNamespace({ namespace: { name: "rechecked", comment: "there" }, updateMask: ["comment"] });
      expect(checks).toEqual(["rechecked", "rechecked"]);
    } finally {
      stop();
      await notifications.stop();
      await db.destroy();
    }
  });

  it("lets a token watch only what it may list, and ends when the export is withdrawn", async () => {
    const reader_ = (await a.admin.namespaces.createNamespace({ namespace: { name: "reader" } })).namespace!;
    await a.admin.namespaces.createNamespace({ namespace: { name: "sharing", serviceExportTo: ["reader"] } });
    await a.admin.namespaces.createNamespace({ namespace: { name: "private" } });
    const asReader = b.client(reader_.token!).registry;

    const denied = await streamReader(asReader.watchInstances({ namespace: "private", service: "api" })).end();
    expect(denied.code).toBe(Code.PERMISSION_DENIED);
    expect(denied.reason).toBe("NOT_EXPORTED");

    const shared = streamReader(asReader.watchInstances({ namespace: "sharing", service: "api" }));
    expect((await shared.next()).snapshot).toBe(true);
    await a.admin.namespaces.updateNamespace({ namespace: { name: "sharing", serviceExportTo: [] }, updateMask: ["service_export_to"] });
    expect((await shared.end()).code).toBe(Code.PERMISSION_DENIED);
  });

  it("names each bad field", async () => {
    const error = await streamReader(a.admin.registry.watchInstances({ namespace: "", service: "not a name!" })).end();
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field).sort()).toEqual(["namespace", "service"]);
    const missing = await streamReader(a.admin.registry.watchInstances({ namespace: "nowhere", service: "api" })).end();
    expect(missing.code).toBe(Code.NOT_FOUND);
  });

  it("frees every watcher of 1,000 opened and cancelled streams", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "churn" } });
    for (let round = 0; round < 10; round++) {
      const streams = Array.from({ length: 100 }, () => streamReader(b.admin.registry.watchInstances({ namespace: "churn", service: "api" })));
      await Promise.all(streams.map((s) => s.next()));
      if (round === 0) expect(await watchers(b)).toBe(100);
      for (const s of streams) s.cancel();
    }
    await until(async () => (await watchers(b)) === 0, 5_000, "every watcher to be freed");
  });

  it("ends open streams with UNAVAILABLE when the replica shuts down", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "shutdown" } });
    const c = await startTestApp(databaseUrl, env);
    const watch = streamReader(c.admin.registry.watchInstances({ namespace: "shutdown", service: "api" }));
    expect((await watch.next()).snapshot).toBe(true);
    const [ended] = await Promise.all([watch.end(), c.app.stop()]);
    expect(ended.code).toBe(Code.UNAVAILABLE);
    await c.stop();
  });
});
