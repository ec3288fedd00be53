import { randomUUID } from "node:crypto";
import { sql } from "kysely";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { InstanceChangeKind } from "../gen/v1/registry_service.js";
import { Code } from "../src/client/index.js";
import { NamespaceCache } from "../src/namespaces/cache.js";
import { NAMESPACES_CHANNEL } from "../src/platform/db/channels.js";
import { preparedMark } from "../src/platform/db/database.js";
import { Notifications } from "../src/platform/db/notifications.js";
import { Metrics } from "../src/platform/metrics.js";
import { ChangeFeed } from "../src/registry/change-feed.js";
import { HeartbeatBatcher } from "../src/registry/heartbeats.js";
import { InstanceCache } from "../src/registry/instance-cache.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, useTwoReplicas, type TestApp } from "./support/app.js";
import { query, recordingDb } from "./support/database.js";
import { failure, until } from "./support/expect.js";
import { recordingLogger } from "./support/logs.js";
import { streamReader } from "./support/streams.js";
import { heldOpen } from "./support/transactions.js";

let databaseUrl: string;
let a: TestApp;
let b: TestApp;

// Two replicas on one database; a short sweep interval so TTL expiry shows within a test.
useTwoReplicas({ INSTANCE_EXPIRY_SWEEP_MS: "100" }, (replicas) => ({ a, b, databaseUrl } = replicas));

/**
 * A heartbeat batcher of its own (with its instance cache), on a database handle that records every
 * statement it runs (connecting to `url`), and the lines it logs at warn and above; stop() stops
 * the batcher, then closes its connections.
 */
async function recordingBatcher(url = databaseUrl) {
  const { db, statements } = recordingDb(url, 2);
  const { logger, logs } = recordingLogger("warn");
  const notifications = new Notifications(databaseUrl, logger);
  const namespaces = new NamespaceCache(db, notifications, logger);
  const feed = new ChangeFeed({ db, notifications, namespaces, logger, metrics: new Metrics(), checkMs: 60_000, kept: 100 });
  const instances = new InstanceCache(db, notifications, feed, logger);
  const batcher = new HeartbeatBatcher(db, notifications, feed, instances, logger);
  await notifications.start();
  return {
    batcher,
    instances,
    statements,
    logs,
    stop: async () => {
      await batcher.stop();
      await notifications.stop();
      await db.destroy();
    },
  };
}

/**
 * A namespace `name` with one instance (service "api", TTL 60 s), and a recording batcher whose
 * cache holds the namespace; its statements so far are cleared.
 */
async function heldByRecordingBatcher(name: string, url = databaseUrl) {
  const ns = (await a.admin.namespaces.createNamespace({ namespace: { name } })).namespace!;
  const { instance } = await a.admin.registry.registerInstance({ namespace: name, service: "api", host: "h", port: 1, ttlSeconds: 60 });
  const registered = await lastHeartbeat(instance!.id);
  const own = await recordingBatcher(url);
  await own.instances.services(name, ns.id!);
  own.statements.length = 0;
  return { ...own, instance: instance!, registered, target: { namespace: name, service: "api", instanceId: instance!.id } };
}

async function lastHeartbeat(instanceId: string): Promise<number> {
  const [row] = await query(databaseUrl, "select last_heartbeat_at from instances where id = $1", [instanceId]);
  return (row!.last_heartbeat_at as Date).getTime();
}

async function counts(t: TestApp, name: string) {
  const { namespace } = await t.admin.namespaces.getNamespace({ name });
  return [namespace!.totalServiceCount, namespace!.totalInstanceCount, namespace!.totalHealthInstanceCount];
}

describe("registration", () => {
  it("creates the service, and the namespace counts follow on every replica", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "reg" } });
    expect(await counts(b, "reg")).toEqual([0, 0, 0]);

    const { instance } = await a.admin.registry.registerInstance({
      namespace: "reg",
      service: "api",
      host: "10.0.0.1",
      port: 8080,
      metadata: { zone: "a" },
      ttlSeconds: 30,
    });
    expect(instance).toMatchObject({
      namespace: "reg",
      service: "api",
      host: "10.0.0.1",
      port: 8080,
      weight: 100,
      ttlSeconds: 30,
      healthy: true,
      isolate: false,
      metadata: { zone: "a" },
    });
    expect(await counts(b, "reg")).toEqual([1, 1, 1]);

    const second = await b.admin.registry.registerInstance({ namespace: "reg", service: "api", host: "10.0.0.2", port: 8080, ttlSeconds: 30 });
    expect(await counts(a, "reg")).toEqual([1, 2, 2]);

    // The same host and port again is the same instance.
    const again = await a.admin.registry.registerInstance({ namespace: "reg", service: "api", host: "10.0.0.1", port: 8080, weight: 5, ttlSeconds: 30 });
    expect(again.instance!.id).toBe(instance!.id);
    expect(again.instance!.weight).toBe(5);
    expect(await counts(b, "reg")).toEqual([1, 2, 2]);

    await b.admin.registry.deregisterInstance({ namespace: "reg", service: "api", instanceId: second.instance!.id });
    expect(await counts(a, "reg")).toEqual([1, 1, 1]);
    await a.admin.registry.deregisterInstance({ namespace: "reg", service: "api", instanceId: instance!.id });
    // A service without instances stays until deleted.
    expect(await counts(b, "reg")).toEqual([1, 0, 0]);
    expect((await a.admin.registry.listServices({ namespace: "reg" })).services.map((s) => s.name)).toEqual(["api"]);

    expect((await failure(a.admin.namespaces.deleteNamespace({ name: "reg" }))).code).toBe(Code.FAILED_PRECONDITION);
    await a.admin.registry.deleteService({ namespace: "reg", service: "api" });
    expect(await counts(b, "reg")).toEqual([0, 0, 0]);
    await b.admin.namespaces.deleteNamespace({ name: "reg" });
  });

  it("answers the delete of an unknown service without waiting for the registry's revision lock", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "del-unknown" } });
    // Another replica's registry write, holding the revision row.
    const writer = await heldOpen(a.app.db, (tx) => sql`update registry_revision set revision = revision`.execute(tx));
    try {
      expect((await failure(a.admin.registry.deleteService({ namespace: "del-unknown", service: "nope" }))).code).toBe(Code.NOT_FOUND);
    } finally {
      await writer.commit();
    }
  });

  it.each([
    ["port 0", { port: 0 }, "port"],
    ["port 70000", { port: 70_000 }, "port"],
    ["empty host", { host: "" }, "host"],
    ["bad host", { host: "a b" }, "host"],
    ["empty service", { service: "" }, "service"],
    ["bad service", { service: "no spaces" }, "service"],
    ["weight too big", { weight: 10_001 }, "weight"],
    ["ttl too long", { ttlSeconds: 3_601 }, "ttl_seconds"],
    ["bad namespace name", { namespace: "a b" }, "namespace"],
  ])("rejects %s naming the field", async (_label, override, field) => {
    const error = await failure(
      a.admin.registry.registerInstance({ namespace: "x", service: "s", host: "h", port: 1, ...override }),
    );
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toContain(field);
  });

  it("answers NOT_FOUND naming the namespace when it does not exist", async () => {
    const error = await failure(
      a.admin.registry.registerInstance({ namespace: "ghost", service: "s", host: "h", port: 1 }),
    );
    expect(error.code).toBe(Code.NOT_FOUND);
    expect(error.fieldViolations[0]!.field).toBe("namespace");
  });

  it("answers NOT_FOUND for unknown services and instances", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "nf" } });
    expect((await failure(a.admin.registry.listInstances({ namespace: "nf", service: "none" }))).code).toBe(Code.NOT_FOUND);
    expect((await failure(a.admin.registry.deleteService({ namespace: "nf", service: "none" }))).code).toBe(Code.NOT_FOUND);
    for (const instanceId of ["not-a-uuid", "00000000-0000-0000-0000-000000000000"]) {
      expect((await failure(a.admin.registry.heartbeat({ namespace: "nf", service: "s", instanceId }))).code).toBe(Code.NOT_FOUND);
      expect((await failure(a.admin.registry.deregisterInstance({ namespace: "nf", service: "s", instanceId }))).code).toBe(
        Code.NOT_FOUND,
      );
    }
  });
});

describe("health", () => {
  it("expires an instance whose heartbeats stop, observed on the other replica, and heartbeats revive it", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "ttl" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "ttl", service: "api", host: "h", port: 1, ttlSeconds: 1 });
    const heartbeat = await a.admin.registry.heartbeat({ namespace: "ttl", service: "api", instanceId: instance!.id });
    expect(heartbeat.expireTime!.getTime()).toBeGreaterThan(Date.now());
    expect(await counts(b, "ttl")).toEqual([1, 1, 1]);

    await until(async () => (await counts(b, "ttl"))[2] === 0);
    expect(await counts(b, "ttl")).toEqual([1, 1, 0]);
    const listed = await b.admin.registry.listInstances({ namespace: "ttl", service: "api" });
    expect(listed.instances[0]!.healthy).toBe(false);
    expect((await b.admin.registry.listInstances({ namespace: "ttl", service: "api", healthyOnly: true })).instances).toEqual([]);

    await b.admin.registry.heartbeat({ namespace: "ttl", service: "api", instanceId: instance!.id });
    expect(await counts(a, "ttl")).toEqual([1, 1, 1]);
  });

  it("renews healthy and expired instances in one batch, reviving the expired one as a recorded change", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "mixed" } });
    const live = (await a.admin.registry.registerInstance({ namespace: "mixed", service: "api", host: "h", port: 1, ttlSeconds: 60 })).instance!;
    const lapsed = (await a.admin.registry.registerInstance({ namespace: "mixed", service: "api", host: "h", port: 2, ttlSeconds: 1 })).instance!;
    await until(async () => (await counts(b, "mixed"))[2] === 1);
    const changes = async () =>
      (await query(databaseUrl, `select kind, instance->>'id' as id from registry_changes where namespace = 'mixed' order by revision`)).map((r) => `${r.kind} ${r.id}`);
    const before = await changes();

    const { results } = await b.admin.registry.batchHeartbeat({
      heartbeats: [live, lapsed].map((i) => ({ namespace: "mixed", service: "api", instanceId: i.id })),
    });
    expect(results.map((r) => r.status!.code)).toEqual([Code.OK, Code.OK]);
    expect(results.every((r) => r.expireTime!.getTime() > Date.now())).toBe(true);
    expect(await counts(a, "mixed")).toEqual([1, 2, 2]);
    // Only the revival is a change; renewing the healthy instance records nothing.
    expect(await changes()).toEqual([...before, `revived ${lapsed.id}`]);
  });

  it("renews a healthy instance in place on its page, leaving the table's indexes alone", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hot" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hot", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const updates = async () => {
      const [row] = await query(
        databaseUrl,
        `select pg_stat_force_next_flush(), (select n_tup_upd from pg_stat_user_tables where relname = 'instances') as updated,
                (select n_tup_hot_upd from pg_stat_user_tables where relname = 'instances') as hot`,
      );
      return { updated: Number(row!.updated), hot: Number(row!.hot) };
    };
    // Backends report their statistics when idle, within seconds; the counts only ever grow.
    const before = await updates();
    // Each renewal written before the next heartbeat: renewals waiting together are written once.
    for (let i = 0; i < 10; i++) {
      const last = await lastHeartbeat(instance!.id);
      await a.admin.registry.heartbeat({ namespace: "hot", service: "api", instanceId: instance!.id });
      await until(async () => (await lastHeartbeat(instance!.id)) > last, 5_000, "the renewal to be written");
    }
    await until(async () => (await updates()).updated >= before.updated + 10, 20_000, "the heartbeats' statistics");
    const after = await updates();
    // Other tests' writes may land meanwhile; the heartbeats alone would make every update heap-only.
    expect(after.hot - before.hot).toBeGreaterThanOrEqual(10);
  });

  it("does not notify the namespace cache for heartbeats of a healthy instance", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "quiet" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "quiet", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const listener = new pg.Client({ connectionString: databaseUrl });
    await listener.connect();
    const notices: string[] = [];
    // A notice on the wire is `<notice id>:<namespace name>`.
    listener.on("notification", (n) => notices.push((n.payload ?? "").replace(/^[0-9a-f-]{36}:/, "")));
    await listener.query(`LISTEN ${NAMESPACES_CHANNEL}`);
    try {
      await Promise.all(
        Array.from({ length: 50 }, () => a.admin.registry.heartbeat({ namespace: "quiet", service: "api", instanceId: instance!.id })),
      );
      await a.admin.namespaces.updateNamespace({ namespace: { name: "quiet", comment: "marker" } });
      await until(async () => notices.includes("quiet"));
      expect(notices).toEqual(["quiet"]);
    } finally {
      await listener.end();
    }
  });

  it("renews many instances in one batch, each with its own result", async () => {
    const ns = (await a.admin.namespaces.createNamespace({ namespace: { name: "batch-hb" } })).namespace!;
    await a.admin.namespaces.createNamespace({ namespace: { name: "batch-other" } });
    const mine = await a.admin.registry.registerInstance({ namespace: "batch-hb", service: "api", host: "h", port: 1, ttlSeconds: 30 });
    const theirs = await a.admin.registry.registerInstance({ namespace: "batch-other", service: "api", host: "h", port: 1 });
    const asNamespace = b.client(ns.token!).registry;
    const { results } = await asNamespace.batchHeartbeat({
      heartbeats: [
        { namespace: "batch-hb", service: "api", instanceId: mine.instance!.id },
        { namespace: "batch-other", service: "api", instanceId: theirs.instance!.id },
        { namespace: "batch-hb", service: "api", instanceId: "00000000-0000-0000-0000-000000000000" },
        { namespace: "batch-hb", service: "", instanceId: mine.instance!.id },
        // The right instance under another service, in the same batch as its right heartbeat.
        { namespace: "batch-hb", service: "web", instanceId: mine.instance!.id },
      ],
    });
    expect(results.map((r) => r.status!.code)).toEqual([
      Code.OK,
      Code.PERMISSION_DENIED,
      Code.NOT_FOUND,
      Code.INVALID_ARGUMENT,
      Code.NOT_FOUND,
    ]);
    expect(results[0]!.expireTime!.getTime()).toBeGreaterThan(Date.now() + 25_000);
    expect(results[3]!.status!.message).toContain("heartbeats[3].service");
    expect(results.map((r) => r.instanceId)).toEqual([mine.instance!.id, theirs.instance!.id, "00000000-0000-0000-0000-000000000000", mine.instance!.id, mine.instance!.id]);

    const empty = await failure(asNamespace.batchHeartbeat({ heartbeats: [] }));
    expect(empty.fieldViolations[0]!.field).toBe("heartbeats");
  });

  it("answers heartbeats of unknown instances without the revival transaction, in a batch with known ones", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-unknown" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hb-unknown", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const { batcher, statements, stop } = await recordingBatcher();
    try {
      const at = { namespace: "hb-unknown", service: "api" };
      const [known, ...unknown] = await Promise.all([
        batcher.renew({ ...at, instanceId: instance!.id }),
        batcher.renew({ ...at, instanceId: randomUUID() }),
        batcher.renew({ ...at, service: "other", instanceId: randomUUID() }),
      ]);
      expect(known!.getTime()).toBeGreaterThan(Date.now());
      expect(unknown).toEqual([undefined, undefined]);
      // Only instances found but not healthy take the transactional statement; the healthy renewal ran.
      expect(statements.filter((s) => s.startsWith(preparedMark("renew_healthy_instances")))).not.toEqual([]);
      expect(statements.filter((s) => s.startsWith(preparedMark("renew_instances")))).toEqual([]);
    } finally {
      await stop();
    }
  });

  it("refuses a heartbeat that names another namespace's instance", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-one" } });
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-two" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hb-one", service: "api", host: "h", port: 1 });
    const error = await failure(a.admin.registry.heartbeat({ namespace: "hb-two", service: "api", instanceId: instance!.id }));
    expect(error.code).toBe(Code.NOT_FOUND);
  });

  it("lets only admins isolate; isolated instances leave healthy counts and discovery", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "iso" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "iso", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const user = await createAccountWithKey(a, ["namespaces"]);
    const denied = await failure(
      a.client(user.key).registry.updateInstance({
        namespace: "iso",
        service: "api",
        instanceId: instance!.id,
        isolate: true,
        updateMask: ["isolate"],
      }),
    );
    expect(denied.code).toBe(Code.PERMISSION_DENIED);

    const updated = await a.admin.registry.updateInstance({
      namespace: "iso",
      service: "api",
      instanceId: instance!.id,
      isolate: true,
      weight: 7,
      updateMask: ["isolate", "weight"],
    });
    expect(updated.instance).toMatchObject({ isolate: true, weight: 7, healthy: true });
    expect(await counts(b, "iso")).toEqual([1, 1, 0]);
    expect((await b.admin.registry.listInstances({ namespace: "iso", service: "api", healthyOnly: true })).instances).toEqual([]);
    expect((await b.admin.registry.listInstances({ namespace: "iso", service: "api" })).instances).toHaveLength(1);

    const noMask = await failure(a.admin.registry.updateInstance({ namespace: "iso", service: "api", instanceId: instance!.id }));
    expect(noMask.fieldViolations[0]!.field).toBe("update_mask");

    // Over HTTP the mask may ride in the query, as it does for a namespace, the changes in the body.
    const path = `/v1/namespaces/iso/services/api/instances/${instance!.id}`;
    const byQuery = await a.http("PATCH", `${path}?update_mask=weight`, { token: ADMIN_TOKEN, body: { weight: 0 } });
    expect(byQuery.status, JSON.stringify(byQuery.body)).toBe(200);
    expect(byQuery.body).toMatchObject({ weight: 0, isolate: true });
    const agreeing = await a.http("PATCH", `${path}?update_mask=weight&weight=4`, { token: ADMIN_TOKEN, body: { weight: 4 } });
    expect(agreeing.status, JSON.stringify(agreeing.body)).toBe(200);
    expect(agreeing.body).toMatchObject({ weight: 4 });
    const conflicting = await a.http("PATCH", `${path}?update_mask=weight`, { token: ADMIN_TOKEN, body: { weight: 3, update_mask: "isolate" } });
    expect(conflicting.status).toBe(400);
    expect(conflicting.body.message).toBe("update_mask: differs between the query and the body; give it in one of them, or the same in both");
  });
});

describe("heartbeats of instances held in memory", () => {
  it("are answered without a statement, and their renewals written with the next flush", async () => {
    const { batcher, statements, stop, instance, registered, target } = await heldByRecordingBatcher("hb-memory");
    try {
      const expiresAt = await batcher.renew(target);
      expect(statements).toEqual([]);
      expect(expiresAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);
      expect(await lastHeartbeat(instance.id)).toBe(registered);
      await batcher.flush();
      expect(statements.filter((s) => s.startsWith(preparedMark("renew_healthy_instances")))).toHaveLength(1);
      expect(await lastHeartbeat(instance.id)).toBeGreaterThan(registered);
    } finally {
      await stop();
    }
  });

  it("keep the renewals of a failed flush for the next one, log the failure, and wait for their own write until a flush succeeds", async () => {
    // Statements that wait for a lock longer than 100 ms fail.
    const url = new URL(databaseUrl);
    url.searchParams.set("options", "-c lock_timeout=100");
    const { batcher, logs, statements, stop, instance, registered, target } = await heldByRecordingBatcher("hb-retry", url.toString());
    try {
      await batcher.renew(target);
      // Another transaction holds the instance's row, as a slow writer on another replica would.
      const writer = await heldOpen(a.app.db, (tx) => sql`select id from instances where id = ${instance.id} for update`.execute(tx));
      try {
        await batcher.flush();
      } finally {
        await writer.commit();
      }
      expect(logs.filter((l) => l.event === "heartbeat_batch_failed")).toEqual([expect.objectContaining({ size: 1, deferred: true })]);
      expect(await lastHeartbeat(instance.id)).toBe(registered);
      // Renewals are not reaching the database: a heartbeat is answered once its own write is done.
      const beforeFailed = statements.length;
      await batcher.renew(target);
      expect(statements.length).toBeGreaterThan(beforeFailed);
      await batcher.flush();
      expect(await lastHeartbeat(instance.id)).toBeGreaterThan(registered);
      // A flush went through: answered from memory again.
      const afterFlush = statements.length;
      await batcher.renew(target);
      expect(statements.length).toBe(afterFlush);
    } finally {
      await stop();
    }
  });

  it("reach the database on their own, from a replica that holds the namespace", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-flushed" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hb-flushed", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const registered = await lastHeartbeat(instance!.id);
    await a.admin.registry.listInstances({ namespace: "hb-flushed", service: "api" });
    await a.admin.registry.heartbeat({ namespace: "hb-flushed", service: "api", instanceId: instance!.id });
    await until(async () => (await lastHeartbeat(instance!.id)) > registered, 5_000, "the renewal to be written");
  });

  it("are written when the batcher stops", async () => {
    const { batcher, statements, stop, instance, registered, target } = await heldByRecordingBatcher("hb-stop");
    try {
      await batcher.renew(target);
      expect(statements).toEqual([]);
    } finally {
      await stop();
    }
    expect(await lastHeartbeat(instance.id)).toBeGreaterThan(registered);
  });

  it("are written when a replica shuts down", async () => {
    const c = await startTestApp(databaseUrl, { INSTANCE_EXPIRY_SWEEP_MS: "100" });
    try {
      await c.admin.namespaces.createNamespace({ namespace: { name: "hb-shutdown" } });
      const { instance } = await c.admin.registry.registerInstance({ namespace: "hb-shutdown", service: "api", host: "h", port: 1, ttlSeconds: 60 });
      const registered = await lastHeartbeat(instance!.id);
      await c.admin.registry.listInstances({ namespace: "hb-shutdown", service: "api" });
      await c.admin.registry.heartbeat({ namespace: "hb-shutdown", service: "api", instanceId: instance!.id });
      await c.stop();
      expect(await lastHeartbeat(instance!.id)).toBeGreaterThan(registered);
      expect(c.logs.filter((l) => String(l.event).startsWith("heartbeat_"))).toEqual([]);
    } finally {
      await c.stop();
    }
  });

  it("keep an instance heartbeating only through one replica from the other replica's sweeper", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-a-only" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hb-a-only", service: "api", host: "h", port: 1, ttlSeconds: 1 });
    await a.admin.registry.listInstances({ namespace: "hb-a-only", service: "api" });
    // Four heartbeats per TTL for three TTLs, while both replicas sweep every 100 ms.
    for (let i = 0; i < 12; i++) {
      await a.admin.registry.heartbeat({ namespace: "hb-a-only", service: "api", instanceId: instance!.id });
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const kinds = await query(databaseUrl, "select kind from registry_changes where instance->>'id' = $1 order by revision", [instance!.id]);
    expect(kinds.map((k) => k.kind)).toEqual(["registered"]);
    expect(await counts(b, "hb-a-only")).toEqual([1, 1, 1]);
  });

  it("answer NOT_FOUND for an unknown id, or a known id under another service", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "hb-held-nf" } });
    const { instance } = await a.admin.registry.registerInstance({ namespace: "hb-held-nf", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    await a.admin.registry.listInstances({ namespace: "hb-held-nf", service: "api" });
    await a.admin.registry.heartbeat({ namespace: "hb-held-nf", service: "api", instanceId: instance!.id });
    for (const [service, instanceId] of [["api", randomUUID()], ["web", instance!.id]] as const) {
      expect((await failure(a.admin.registry.heartbeat({ namespace: "hb-held-nf", service, instanceId }))).code).toBe(Code.NOT_FOUND);
    }
  });

  it("revive an instance expired since it was read, and watchers hear of it", async () => {
    const { batcher, stop, instance, target } = await heldByRecordingBatcher("hb-revive");
    const watch = streamReader(b.admin.registry.watchInstances({ namespace: "hb-revive", service: "api" }));
    try {
      expect((await watch.next()).snapshot).toBe(true);
      // Expired by a sweeper whose notice has not arrived: this batcher's cache still holds it healthy.
      await query(databaseUrl, "update instances set healthy = false where id = $1", [instance.id]);
      const expiresAt = await batcher.renew(target);
      expect(expiresAt!.getTime()).toBeGreaterThan(Date.now());
      await batcher.flush();
      const revived = await watch.next();
      expect(revived.change?.kind).toBe(InstanceChangeKind.INSTANCE_CHANGE_KIND_REVIVED);
      expect(revived.change?.instance).toMatchObject({ id: instance.id, healthy: true });
      expect(await counts(b, "hb-revive")).toEqual([1, 1, 1]);
    } finally {
      watch.cancel();
      await stop();
    }
  });
});

describe("namespace tokens and visibility", () => {
  it("register only in their own namespace and see others only where exported", async () => {
    const home = (await a.admin.namespaces.createNamespace({ namespace: { name: "home" } })).namespace!;
    await a.admin.namespaces.createNamespace({ namespace: { name: "open", serviceExportTo: ["*"] } });
    await a.admin.namespaces.createNamespace({ namespace: { name: "friend", serviceExportTo: ["home"] } });
    await a.admin.namespaces.createNamespace({ namespace: { name: "closed", serviceExportTo: ["elsewhere"] } });
    for (const namespace of ["open", "friend", "closed"]) {
      await a.admin.registry.registerInstance({ namespace, service: "svc", host: "h", port: 1 });
    }

    const asHome = b.client(home.token!).registry;
    const { instance } = await asHome.registerInstance({ namespace: "home", service: "mine", host: "h", port: 2 });
    await asHome.heartbeat({ namespace: "home", service: "mine", instanceId: instance!.id });
    const wrongNamespace = await failure(asHome.registerInstance({ namespace: "open", service: "x", host: "h", port: 3 }));
    expect(wrongNamespace.code).toBe(Code.PERMISSION_DENIED);

    expect((await asHome.listServices({ namespace: "home" })).services.map((s) => s.name)).toEqual(["mine"]);
    expect((await asHome.listServices({ namespace: "open" })).services.map((s) => s.name)).toEqual(["svc"]);
    expect((await asHome.listInstances({ namespace: "friend", service: "svc" })).instances).toHaveLength(1);
    const hidden = await failure(asHome.listServices({ namespace: "closed" }));
    expect(hidden.code).toBe(Code.PERMISSION_DENIED);
    expect(hidden.reason).toBe("NOT_EXPORTED");

    // The token only opens the registry, and stops working once rotated.
    expect((await failure(b.client(home.token!).namespaces.listNamespaces({}))).code).toBe(Code.PERMISSION_DENIED);
    await a.admin.namespaces.updateNamespaceToken({ name: "home" });
    expect((await failure(asHome.listServices({ namespace: "home" }))).code).toBe(Code.UNAUTHENTICATED);
  });
});

describe("over HTTP", () => {
  it("registers, heartbeats, lists and deregisters", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "web" } });
    const key = ADMIN_TOKEN;
    const created = await a.http("POST", "/v1/namespaces/web/services/api/instances", {
      token: key,
      body: { host: "10.1.1.1", port: 443, ttl_seconds: 30, metadata: { v: "1" } },
    });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ host: "10.1.1.1", port: 443, healthy: true, ttl_seconds: 30 });
    const id = created.body.id as string;

    const beat = await b.http("POST", `/v1/namespaces/web/services/api/instances/${id}:heartbeat`, { token: key, body: {} });
    expect(beat.status).toBe(200);
    expect(Date.parse(beat.body.expire_time)).toBeGreaterThan(Date.now());

    const listed = await b.http("GET", "/v1/namespaces/web/services/api/instances?healthy_only=true", { token: key });
    expect(listed.body.instances.map((i: { id: string }) => i.id)).toEqual([id]);
    const services = await b.http("GET", "/v1/namespaces/web/services", { token: key });
    expect(services.body).toMatchObject({ amount: 1, services: [{ name: "api", instance_count: 1, healthy_instance_count: 1 }] });

    const bad = await a.http("POST", "/v1/namespaces/web/services/api/instances", { token: key, body: { host: "", port: 99999 } });
    expect(bad.status).toBe(400);
    expect(bad.body.details[0].field_violations.map((v: { field: string }) => v.field).sort()).toEqual(["host", "port"]);

    expect((await a.http("DELETE", `/v1/namespaces/web/services/api/instances/${id}`, { token: key })).status).toBe(200);
    expect((await a.http("DELETE", "/v1/namespaces/web/services/api", { token: key })).status).toBe(200);
  });
});
