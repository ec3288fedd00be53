import pg from "pg";
import { describe, expect, it } from "vitest";
import { ApiError, Code } from "../src/client/index.js";
import { Notifications } from "../src/platform/db/notifications.js";
import { createLogger } from "../src/platform/logger.js";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, useTwoReplicas, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { failure, until } from "./support/expect.js";

// Two replicas of the service on one database, as in a scaled-out deployment. Each keeps its own
// caches (namespaces, API keys); these tests check that no replica serves stale data after a write
// on the other one has returned.
let a: TestApp;
let b: TestApp;

const replicas = useTwoReplicas({}, (started) => ({ a, b } = started));

/** Fills both replicas' caches, so that a stale entry would be served if invalidation failed. */
async function warm(...names: string[]): Promise<void> {
  for (const t of [a, b]) {
    await t.admin.namespaces.listNamespaces({});
    for (const name of names) await t.admin.namespaces.getNamespace({ name }).catch(() => undefined);
  }
}

describe("namespaces across replicas", () => {
  it("a namespace created on A is returned by Get and List on B at once", async () => {
    await warm("across-1");
    const { namespace } = await a.admin.namespaces.createNamespace({ namespace: { name: "across-1", comment: "from a" } });
    const { namespace: got } = await b.admin.namespaces.getNamespace({ name: "across-1" });
    expect(got).toMatchObject({ id: namespace!.id, name: "across-1", comment: "from a" });
    const listed = await b.admin.namespaces.listNamespaces({ name: ["across-1"] });
    expect(listed.namespaces.map((n) => n.id)).toEqual([namespace!.id]);
  });

  it("batch creates of the same names on both, in opposite orders, create each once and never deadlock", async () => {
    for (let round = 0; round < 5; round++) {
      const names = Array.from({ length: 100 }, (_, i) => `both-${round}-${i}`);
      const [onA, onB] = await Promise.all([
        a.admin.namespaces.batchCreateNamespaces({ namespaces: names.map((name) => ({ name, comment: "a" })) }),
        b.admin.namespaces.batchCreateNamespaces({ namespaces: names.toReversed().map((name) => ({ name, comment: "b" })) }),
      ]);
      const created = [...onA.results, ...onB.results].filter((r) => r.status!.code === Code.OK).map((r) => r.namespace!.name);
      expect(created.toSorted()).toEqual(names.toSorted());
      expect([...onA.results, ...onB.results].filter((r) => r.status!.code !== Code.OK).map((r) => r.status!.code)).toEqual(
        names.map(() => Code.ALREADY_EXISTS),
      );
    }
  });

  it("an update on B is seen by Get and List on A at once", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "across-2", comment: "v1", metadata: { k: "1" } } });
    await warm("across-2");
    const { namespace: updated } = await b.admin.namespaces.updateNamespace({
      namespace: { name: "across-2", comment: "v2", metadata: { k: "2" } },
    });
    const { namespace: got } = await a.admin.namespaces.getNamespace({ name: "across-2" });
    expect(got).toMatchObject({ comment: "v2", metadata: { k: "2" }, mtime: updated!.mtime });
    const listed = await a.admin.namespaces.listNamespaces({ name: ["across-2"] });
    expect(listed.namespaces[0]).toMatchObject({ comment: "v2", metadata: { k: "2" } });
  });

  it("a delete on A makes B answer NOT_FOUND and drop it from List at once", async () => {
    await a.admin.namespaces.createNamespace({ namespace: { name: "across-3" } });
    await warm("across-3");
    await a.admin.namespaces.deleteNamespace({ name: "across-3" });
    expect((await failure(b.admin.namespaces.getNamespace({ name: "across-3" }))).code).toBe(Code.NOT_FOUND);
    expect((await b.admin.namespaces.listNamespaces({ name: ["across-3"] })).namespaces).toEqual([]);
  });

  it("a token rotated on A is the token B returns", async () => {
    const { namespace } = await a.admin.namespaces.createNamespace({ namespace: { name: "across-4" } });
    expect((await b.admin.namespaces.getNamespaceToken({ name: "across-4" })).token).toBe(namespace!.token);
    const rotated = await a.admin.namespaces.updateNamespaceToken({ name: "across-4" });
    expect(rotated.token).not.toBe(namespace!.token);
    expect((await b.admin.namespaces.getNamespaceToken({ name: "across-4" })).token).toBe(rotated.token);
    const again = await b.admin.namespaces.updateNamespaceToken({ name: "across-4" });
    expect((await a.admin.namespaces.getNamespaceToken({ name: "across-4" })).token).toBe(again.token);
  });

  it("grants given on A apply on B at once", async () => {
    const owner = await createAccountWithKey(a, ["namespaces"]);
    const friend = await createAccountWithKey(a, ["namespaces"]);
    await a.client(owner.key).namespaces.createNamespace({ namespace: { name: "across-5" } });
    expect((await b.client(friend.key).namespaces.getNamespace({ name: "across-5" })).namespace!.editable).toBe(false);
    await a.client(owner.key).namespaces.updateNamespace({
      namespace: { name: "across-5", userIds: [friend.accountId] },
      updateMask: ["user_ids"],
    });
    expect((await b.client(friend.key).namespaces.getNamespace({ name: "across-5" })).namespace!.editable).toBe(true);
  });

  it("create on one replica, read on the other, 50 times over, never misses", async () => {
    for (let i = 0; i < 50; i++) {
      const [writer, reader] = i % 2 === 0 ? [a, b] : [b, a];
      // Reading everything first keeps the reader's cache complete, so a lost notice would show.
      await reader.admin.namespaces.listNamespaces({ limit: 1 });
      const name = `race-${i}`;
      const { namespace } = await writer.admin.namespaces.createNamespace({ namespace: { name, comment: `c${i}` } });
      const { namespace: got } = await reader.admin.namespaces.getNamespace({ name });
      expect(got!.id, name).toBe(namespace!.id);
      const listed = await reader.admin.namespaces.listNamespaces({ name: [name] });
      expect(listed.namespaces.map((n) => n.id), name).toEqual([namespace!.id]);

      await writer.admin.namespaces.updateNamespace({ namespace: { name, comment: `u${i}` } });
      expect((await reader.admin.namespaces.getNamespace({ name })).namespace!.comment, name).toBe(`u${i}`);

      await writer.admin.namespaces.deleteNamespace({ name });
      expect((await failure(reader.admin.namespaces.getNamespace({ name }))).code, name).toBe(Code.NOT_FOUND);
    }
    const { amount } = await a.admin.namespaces.listNamespaces({ name: ["race-*"] });
    expect(amount).toBe(0);
  });

  it("concurrent creates of one name on both replicas: exactly one wins", async () => {
    for (let i = 0; i < 10; i++) {
      const name = `contended-${i}`;
      const results = await Promise.allSettled([
        a.admin.namespaces.createNamespace({ namespace: { name } }),
        b.admin.namespaces.createNamespace({ namespace: { name } }),
      ]);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const rejected = results.find((r) => r.status === "rejected")!.reason as ApiError;
      expect(rejected.code).toBe(Code.ALREADY_EXISTS);
      const [fromA, fromB] = await Promise.all([
        a.admin.namespaces.getNamespace({ name }),
        b.admin.namespaces.getNamespace({ name }),
      ]);
      expect(fromA.namespace!.id).toBe(fromB.namespace!.id);
    }
  });
});

describe("API keys across replicas", () => {
  it("a key created on A works on B, and revoking it on A makes it fail on B at once", async () => {
    const user = await createAccountWithKey(a, ["namespaces"]);
    // Both replicas have the key cached as valid.
    await a.client(user.key).namespaces.listNamespaces({});
    await b.client(user.key).namespaces.listNamespaces({});
    await b.client(user.key).namespaces.listNamespaces({});

    await a.admin.admin.revokeApiKey({ keyId: user.keyId });
    const onB = await failure(b.client(user.key).namespaces.listNamespaces({}));
    expect(onB.code).toBe(Code.UNAUTHENTICATED);
    expect(onB.reason).toBe("API_KEY_REVOKED");
    expect((await failure(a.client(user.key).namespaces.listNamespaces({}))).reason).toBe("API_KEY_REVOKED");
  });

  it("revocation on either replica is seen by the other, 20 times over", async () => {
    for (let i = 0; i < 20; i++) {
      const [writer, reader] = i % 2 === 0 ? [a, b] : [b, a];
      const user = await createAccountWithKey(writer, ["namespaces"]);
      await reader.client(user.key).namespaces.listNamespaces({ limit: 1 });
      await writer.admin.admin.revokeApiKey({ keyId: user.keyId });
      expect((await failure(reader.client(user.key).namespaces.listNamespaces({ limit: 1 }))).reason).toBe(
        "API_KEY_REVOKED",
      );
    }
  });

  it("accounts and keys made on one replica are listed by the other", async () => {
    const user = await createAccountWithKey(b, ["webhooks"], { name: "made on b" });
    const keys = await a.admin.admin.listApiKeys({ accountId: user.accountId });
    expect(keys.apiKeys.map((k) => k.id)).toEqual([user.keyId]);
    const accounts = await a.admin.admin.listAccounts({ limit: 1 });
    expect(accounts.accounts[0]).toMatchObject({ id: user.accountId, name: "made on b" });
  });
});

describe("restart", () => {
  it("a new replica on the same database serves the namespaces and keys written before", async () => {
    const user = await createAccountWithKey(a, ["namespaces"]);
    const { namespace } = await a.client(user.key).namespaces.createNamespace({
      namespace: { name: "survivor", comment: "still here", metadata: { x: "y" } },
    });
    const token = (await a.admin.namespaces.getNamespaceToken({ name: "survivor" })).token;

    await replicas.restart("a");
    expect(a.logs.filter((l) => l.event === "bootstrap_admin_key")).toEqual([]);

    const { namespace: got } = await a.client(user.key).namespaces.getNamespace({ name: "survivor" });
    expect(got).toMatchObject({
      id: namespace!.id,
      comment: "still here",
      metadata: { x: "y" },
      owners: user.accountId,
      editable: true,
      ctime: namespace!.ctime,
    });
    expect((await a.admin.namespaces.getNamespaceToken({ name: "survivor" })).token).toBe(token);

    // The restarted replica and the one that kept running still agree.
    await a.client(user.key).namespaces.updateNamespace({ namespace: { name: "survivor", comment: "after restart" } });
    expect((await b.admin.namespaces.getNamespace({ name: "survivor" })).namespace!.comment).toBe("after restart");
    await b.admin.admin.revokeApiKey({ keyId: user.keyId });
    expect((await failure(a.client(user.key).namespaces.listNamespaces({}))).reason).toBe("API_KEY_REVOKED");
  });
});

describe("change notices", () => {
  it("reach every replica's listeners before the writer's wait settles", async () => {
    const url = await createTestDatabase();
    const logger = createLogger("warn");
    const replicas = [0, 1, 2].map(() => new Notifications(url, logger));
    const seen = replicas.map(() => new Set<string>());
    replicas.forEach((n, i) => n.on("test_channel", (payload) => seen[i]!.add(payload)));
    try {
      for (const n of replicas) await n.start();
      const late: string[] = [];
      for (let i = 0; i < 300; i++) {
        const payload = `p${i}`;
        const writer = replicas[i % replicas.length]!;
        await writer.publish("test_channel", payload);
        seen.forEach((s, r) => {
          if (!s.has(payload)) late.push(`${payload} on replica ${r}`);
        });
      }
      expect(late).toEqual([]);
    } finally {
      for (const n of replicas) await n.stop();
    }
  });

  it("do not hold a writer up for more than a second when a replica stops answering", async () => {
    const url = await createTestDatabase();
    const logger = createLogger("warn");
    const writer = new Notifications(url, logger);
    writer.on("test_channel", () => undefined);
    // A hung replica: its listening connection is open, but it never acknowledges anything.
    const hung = new pg.Client({ connectionString: url, application_name: "atrium-listen" });
    try {
      await writer.start();
      let started = Date.now();
      await writer.publish("test_channel", "alone");
      expect(Date.now() - started).toBeLessThan(500);

      await hung.connect();
      started = Date.now();
      await writer.publish("test_channel", "hung");
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      expect(Date.now() - started).toBeLessThan(2_500);
    } finally {
      await hung.end().catch(() => undefined);
      await writer.stop();
    }
  });
});

describe("a change that was never announced", () => {
  it("is picked up by the periodic cache check", async () => {
    const url = await createTestDatabase();
    const app = await startTestApp(url, { CACHE_CHECK_MS: "200" });
    try {
      await app.admin.namespaces.createNamespace({ namespace: { name: "silent", comment: "before" } });
      // Warm the whole cache, then change the row directly, as a writer that died before its notice would.
      await app.admin.namespaces.listNamespaces({});
      await app.app.db.updateTable("namespaces").set({ comment: "after", updated_at: new Date() }).where("name", "=", "silent").execute();
      expect((await app.admin.namespaces.getNamespace({ name: "silent" })).namespace!.comment).toBe("before");
      await until(
        async () => (await app.admin.namespaces.getNamespace({ name: "silent" })).namespace!.comment === "after",
        5_000,
        "the unannounced comment",
      );
      expect(app.logs.some((l) => l.event === "namespace_cache_resync")).toBe(true);
    } finally {
      await app.stop();
    }
  });
});
