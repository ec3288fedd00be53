import { describe, expect, it } from "vitest";
import { Code, createClient } from "../src/client/index.js";
import { NamespaceChangeKind } from "../gen/v1/namespace_service.js";
import { AuthService } from "../src/auth/service.js";
import { loadConfig } from "../src/config.js";
import { namespacesModule } from "../src/namespaces/module.js";
import { Notifications } from "../src/platform/db/notifications.js";
import { createLogger } from "../src/platform/logger.js";
import { Metrics } from "../src/platform/metrics.js";
import { SsrfGuard } from "../src/platform/ssrf.js";
import { startGrpcServer } from "../src/transport/grpc/server.js";
import { Router } from "../src/transport/router.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, useTwoReplicas, type TestApp } from "./support/app.js";
import { gauge, streamReader } from "./support/streams.js";
import { recordingDb } from "./support/database.js";
import { until } from "./support/expect.js";

let a: TestApp;
let b: TestApp;
let databaseUrl: string;

useTwoReplicas({}, (replicas) => ({ a, b, databaseUrl } = replicas));

async function watchers(t: TestApp): Promise<number> {
  return gauge(t, "atrium_namespace_watchers", ADMIN_TOKEN);
}

describe("WatchNamespaces", () => {
  it("lists every namespace, then each create, update, count change and delete made on any replica", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "before" } });
    const watch = streamReader(b.admin.namespaces.watchNamespaces({}));
    const first = await watch.next();
    expect(first.snapshot).toBe(true);
    expect(first.namespaces.map((n) => n.name)).toContain("before");
    expect(first.namespaces.every((n) => n.token === undefined)).toBe(true);
    const next = async (kind: NamespaceChangeKind, name: string) => {
      const message = await watch.next();
      expect([message.kind, message.namespace?.name]).toEqual([kind, name]);
      return message.namespace!;
    };

    await a.admin.namespaces.createNamespace({ namespace: { name: "followed" } });
    await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_CREATED, "followed");
    await a.admin.namespaces.updateNamespace({ namespace: { name: "followed", comment: "now with a comment" }, updateMask: ["comment"] });
    expect((await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_UPDATED, "followed")).comment).toBe("now with a comment");
    await a.admin.registry.registerInstance({ namespace: "followed", service: "api", host: "h", port: 1, ttlSeconds: 60 });
    const counted = await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_COUNTS_CHANGED, "followed");
    expect([counted.totalServiceCount, counted.totalInstanceCount]).toEqual([1, 1]);
    const rotated = await a.admin.namespaces.updateNamespaceToken({ name: "followed" });
    expect(rotated.token).not.toBe("");
    expect((await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_UPDATED, "followed")).token).toBeUndefined();
    await a.admin.registry.deleteService({ namespace: "followed", service: "api" });
    await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_COUNTS_CHANGED, "followed");
    await a.admin.namespaces.deleteNamespace({ name: "followed" });
    await next(NamespaceChangeKind.NAMESPACE_CHANGE_KIND_DELETED, "followed");
    watch.cancel();
  });

  it("is refused to namespace tokens, which may not list namespaces", async () => {
    const { namespace } = await a.admin.namespaces.createNamespace({ namespace: { name: "tokenholder" } });
    const refused = await streamReader(b.client(namespace!.token!).namespaces.watchNamespaces({})).end();
    expect(refused.code).toBe(Code.PERMISSION_DENIED);
  });

  it("frees every watcher of 1,000 opened and cancelled streams", async () => {
    for (let round = 0; round < 10; round++) {
      const streams = Array.from({ length: 100 }, () => streamReader(a.admin.namespaces.watchNamespaces({})));
      await Promise.all(streams.map((s) => s.next()));
      if (round === 0) expect(await watchers(a)).toBe(100);
      for (const s of streams) s.cancel();
    }
    await until(async () => (await watchers(a)) === 0, 5_000, "every watcher to be freed");
  });

  it("looks a withdrawn API key up once for all the streams it opened", async () => {
    const key = await createAccountWithKey(a, ["namespaces"]);
    // A replica of its own, serving WatchNamespaces on a database handle that records every statement.
    const { db, statements } = recordingDb(databaseUrl, 4);
    const logger = createLogger("silent");
    const notifications = new Notifications(databaseUrl, logger);
    const metrics = new Metrics();
    const auth = new AuthService(db, notifications, logger);
    const config = loadConfig({ DATABASE_URL: databaseUrl, ADMIN_TOKEN });
    const { services } = namespacesModule({ config, logger, db, notifications, metrics, guard: new SsrfGuard({ allowPrivate: true }) });
    const router = new Router({ services, authenticate: auth.authenticate, keyChanges: auth.onKeyChange, logger, metrics });
    await notifications.start();
    const server = await startGrpcServer(router, "127.0.0.1", 0);
    const client = createClient({ address: `127.0.0.1:${server.port}`, token: key.key });
    try {
      const streams = Array.from({ length: 20 }, () => streamReader(client.namespaces.watchNamespaces({})));
      for (const stream of streams) expect((await stream.next()).snapshot).toBe(true);
      const lookups = () => statements.filter((sql) => sql.includes('"key_hash" =')).length;
      const before = lookups();

      await a.admin.admin.revokeApiKey({ keyId: key.keyId });
      for (const ended of await Promise.all(streams.map((s) => s.end()))) expect(ended.reason).toBe("API_KEY_REVOKED");
      expect(lookups() - before).toBe(1);
    } finally {
      client.close();
      await server.shutdown(0);
      await notifications.stop();
      await db.destroy();
    }
  });
});
