import type { KyselyPlugin } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NamespaceCache } from "../src/namespaces/cache.js";
import { Notifications } from "../src/platform/db/notifications.js";
import { createLogger } from "../src/platform/logger.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase, recordingDb } from "./support/database.js";
import { until } from "./support/expect.js";

let url: string;
let writer: TestApp;

beforeAll(async () => {
  url = await createTestDatabase();
  writer = await startTestApp(url);
});

afterAll(async () => {
  await writer.stop();
});

/**
 * A namespace cache of its own on a database handle that records every statement it runs; while
 * `hold` is set, no statement's result reaches the cache until it is released.
 */
async function recordingCache() {
  const recording = recordingDb(url, 2);
  const { statements, parameters } = recording;
  let held: PromiseWithResolvers<void> | undefined;
  const gate: KyselyPlugin = {
    transformQuery: ({ node }) => node,
    transformResult: async ({ result }) => {
      await held?.promise;
      return result;
    },
  };
  const db = recording.db.withPlugin(gate);
  const logger = createLogger("warn");
  const notifications = new Notifications(url, logger);
  // Channels are listened to from the start: the cache subscribes first.
  const cache = new NamespaceCache(db, notifications, logger);
  await notifications.start();
  const reads = () => statements.filter((s) => /from "namespaces"/.test(s)).length;
  /** The names the last read of some names asked for. */
  const lastNames = () => parameters[statements.findLastIndex((s) => /from "namespaces"/.test(s))]?.[0];
  return {
    cache,
    reads,
    lastNames,
    hold: () => (held = Promise.withResolvers()),
    release: () => held?.resolve(),
    stop: async () => {
      held?.resolve();
      await cache.stopChecks();
      await notifications.stop();
      await db.destroy();
    },
  };
}

/**
 * Runs `body` on a recording cache of its own (see recordingCache), read whole first unless `filled`
 * is false, and stops it after.
 */
async function withCache(
  body: (cache: Omit<Awaited<ReturnType<typeof recordingCache>>, "stop">) => Promise<void>,
  { filled = true } = {},
): Promise<void> {
  const { stop, ...recording } = await recordingCache();
  try {
    if (filled) await recording.cache.list();
    await body(recording);
  } finally {
    await stop();
  }
}

/** Waits, with the function it returns, until the cache has heard `count` notices of a name. */
function countNotices(cache: NamespaceCache): (name: string, count: number) => Promise<void> {
  const notices: string[] = [];
  cache.onChange((name) => notices.push(name ?? "*"));
  return (name, count) => until(() => notices.filter((n) => n === name).length >= count, 5_000, `notice ${count} of ${name}`);
}

describe("the namespace cache", () => {
  it("reads every namespace once when its checks start, and answers from memory after that", async () => {
    const names = Array.from({ length: 30 }, (_, i) => `filled-${i}`);
    await writer.admin.namespaces.batchCreateNamespaces({ namespaces: names.map((name) => ({ name })) });
    await withCache(async ({ cache, reads }) => {
      // An hour between checks: only the read made as they start can fill it.
      cache.startChecks(3_600_000);
      await until(() => reads() === 1, 5_000, "the first read");
      const found = await Promise.all(names.map((name) => cache.get(name)));
      expect(found.map((row) => row?.name)).toEqual(names);
      expect(await cache.get("never-created")).toBeUndefined();
      expect(reads()).toBe(1);
    }, { filled: false });
  });

  it("reads the names changed in a burst again together, not one query each", async () => {
    await withCache(async ({ cache, reads }) => {
      expect(reads()).toBe(1);
      const names = Array.from({ length: 40 }, (_, i) => `burst-${i}`);
      await writer.admin.namespaces.batchCreateNamespaces({ namespaces: names.map((name) => ({ name, comment: "burst" })) });
      // A complete cache knows a name only once the notice of its creation has arrived.
      await until(async () => (await cache.get(names.at(-1)!)) !== undefined, 5_000, "the notice of the last name");
      const found = await Promise.all(names.map((name) => cache.get(name)));
      expect(found.map((row) => row?.comment)).toEqual(names.map(() => "burst"));
      // One read for the burst; a notice arriving after the first read costs one more at most each.
      // A read per name made 40.
      expect(reads() - 1).toBeLessThanOrEqual(3);
    });
  });

  it("reads a cached name again once it changes", async () => {
    await withCache(async ({ cache }) => {
      await writer.admin.namespaces.createNamespace({ namespace: { name: "moving", comment: "first" } });
      await until(async () => (await cache.get("moving"))?.comment === "first", 5_000, "the first comment");
      await writer.admin.namespaces.updateNamespace({ namespace: { name: "moving", comment: "second" } });
      await until(async () => (await cache.get("moving"))?.comment === "second", 5_000, "the second comment");
    });
  });

  it("keeps what it read of the names that did not change again meanwhile", async () => {
    await withCache(async ({ cache, reads, hold, release }) => {
      const names = ["calm-1", "calm-2", "calm-3", "churn"];
      const noticed = countNotices(cache);
      await writer.admin.namespaces.batchCreateNamespaces({ namespaces: names.map((name) => ({ name })) });
      for (const name of names) await noticed(name, 1);
      // The names are stale now; a read of them is held while "churn" changes again.
      hold();
      const first = cache.get("calm-1");
      await until(() => reads() === 2, 5_000, "the read of the stale names");
      await writer.admin.namespaces.updateNamespace({ namespace: { name: "churn", comment: "again" } });
      await noticed("churn", 2);
      release();
      expect((await first)?.name).toBe("calm-1");
      // Only "churn" was said to change during the read: the other names are cached, "churn" is read again.
      expect((await cache.get("calm-2"))?.name).toBe("calm-2");
      expect((await cache.get("calm-3"))?.name).toBe("calm-3");
      expect(reads()).toBe(2);
      expect((await cache.get("churn"))?.comment).toBe("again");
      expect(reads()).toBe(3);
    });
  });

  it("never answers a read begun before a change to a caller who comes after it, nor brings back a deleted name", async () => {
    await withCache(async ({ cache, hold, release }) => {
      const noticed = countNotices(cache);
      await writer.admin.namespaces.batchCreateNamespaces({ namespaces: [{ name: "changing", comment: "one" }, { name: "leaving" }] });
      await noticed("changing", 1);
      await noticed("leaving", 1);
      hold();
      const before = [cache.get("changing"), cache.get("leaving")];
      await writer.admin.namespaces.updateNamespace({ namespace: { name: "changing", comment: "two" } });
      await writer.admin.namespaces.deleteNamespace({ name: "leaving" });
      await noticed("changing", 2);
      await noticed("leaving", 2);
      const after = [cache.get("changing"), cache.get("leaving")];
      release();
      await Promise.all(before);
      const [changing, leaving] = await Promise.all(after);
      expect(changing?.comment).toBe("two");
      expect(leaving).toBeUndefined();
      expect((await cache.get("changing"))?.comment).toBe("two");
      expect(await cache.get("leaving")).toBeUndefined();
    });
  });

  it("finds a namespace by its token while it changes on every read of it", async () => {
    await withCache(async ({ cache, reads, hold, release }) => {
      const noticed = countNotices(cache);
      const created = (await writer.admin.namespaces.createNamespace({ namespace: { name: "restless" } })).namespace!;
      await noticed("restless", 1);
      // Every read of the stale name is overtaken by another change to it (registrations into a
      // namespace announce it each time), so the cache gives up and answers from a read of the whole.
      hold();
      const found = cache.findByToken(created.token!);
      for (let change = 1; change <= 4; change++) {
        await until(() => reads() === 1 + change, 5_000, `read ${change}`);
        await writer.admin.namespaces.updateNamespace({ namespace: { name: "restless", comment: `change ${change}` } });
        await noticed("restless", 1 + change);
        release();
        hold();
      }
      release();
      expect((await found)?.name).toBe("restless");
    });
  });

  it("reads a name changed during a read of the backlog again alone", async () => {
    await withCache(async ({ cache, reads, lastNames, hold, release }) => {
      const noticed = countNotices(cache);
      const names = Array.from({ length: 20 }, (_, i) => `wave-${i}`);
      await writer.admin.namespaces.batchCreateNamespaces({ namespaces: names.map((name) => ({ name })) });
      for (const name of names) await noticed(name, 1);
      hold();
      const first = cache.get("wave-0");
      await until(() => reads() === 2, 5_000, "the read of the backlog");
      expect(lastNames()).toHaveLength(20);
      await writer.admin.namespaces.updateNamespace({ namespace: { name: "wave-7", comment: "moved" } });
      await noticed("wave-7", 2);
      const changed = cache.get("wave-7");
      await until(() => reads() === 3, 5_000, "the read of the changed name");
      expect(lastNames()).toEqual(["wave-7"]);
      release();
      expect((await first)?.name).toBe("wave-0");
      expect((await changed)?.comment).toBe("moved");
      const rest = await Promise.all(names.map((name) => cache.get(name)));
      expect(rest.map((row) => row?.name)).toEqual(names);
      expect(reads()).toBe(3);
    });
  });
});
