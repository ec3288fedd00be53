import { describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { NamespaceChangeKind } from "../gen/v1/namespace_service.js";
import { ADMIN_TOKEN, useTwoReplicas, type TestApp } from "./support/app.js";
import { gauge, streamReader } from "./support/streams.js";
import { until } from "./support/expect.js";

let a: TestApp;
let b: TestApp;

useTwoReplicas({}, (replicas) => ({ a, b } = replicas));

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
});
