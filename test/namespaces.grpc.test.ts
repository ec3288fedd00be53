import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, type ApiError } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { failure } from "./support/expect.js";

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
});
afterAll(async () => {
  await t?.stop();
});

const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;

describe("CreateNamespace", () => {
  it("creates a namespace and returns every field with a 32-hex token", async () => {
    const { namespace } = await t.admin.namespaces.createNamespace({
      namespace: {
        name: "payments",
        comment: "the payments team",
        owners: "alice,bert",
        serviceExportTo: ["billing", "*"],
        metadata: { team: "core", tier: "1" },
        syncToGlobalRegistry: true,
      },
    });
    expect(namespace).toMatchObject({
      name: "payments",
      comment: "the payments team",
      owners: "alice,bert",
      serviceExportTo: ["billing", "*"],
      metadata: { team: "core", tier: "1" },
      syncToGlobalRegistry: true,
      totalServiceCount: 0,
      totalInstanceCount: 0,
      totalHealthInstanceCount: 0,
      editable: true,
      deleteable: true,
    });
    expect(namespace!.token).toMatch(/^[0-9a-f]{32}$/);
    expect(namespace!.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(namespace!.ctime).toMatch(RFC3339);
    expect(namespace!.mtime).toBe(namespace!.ctime);
  });

  it("defaults owners to the creating account", async () => {
    const user = await createAccountWithKey(t, ["namespaces"]);
    const { namespace } = await t.client(user.key).namespaces.createNamespace({ namespace: { name: "mine" } });
    expect(namespace!.owners).toBe(user.accountId);
    expect(namespace!.comment).toBeUndefined();
  });

  it("refuses a duplicate name with ALREADY_EXISTS", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "dup" } });
    const error = await failure(t.admin.namespaces.createNamespace({ namespace: { name: "dup" } }));
    expect(error.code).toBe(Code.ALREADY_EXISTS);
    expect(error.reason).toBe("NAMESPACE_EXISTS");
    expect(error.message).toContain("dup");
  });

  it.each([
    ["missing namespace", {}, "namespace"],
    ["missing name", { namespace: {} }, "namespace.name"],
    ["empty name", { namespace: { name: "" } }, "namespace.name"],
    ["bad characters", { namespace: { name: "has space" } }, "namespace.name"],
    ["too long name", { namespace: { name: "x".repeat(65) } }, "namespace.name"],
    ["too long comment", { namespace: { name: "c1", comment: "x".repeat(1025) } }, "namespace.comment"],
    ["too long owners", { namespace: { name: "c2", owners: "x".repeat(1025) } }, "namespace.owners"],
    ["bad export target", { namespace: { name: "c3", serviceExportTo: ["ok", "no way"] } }, "namespace.service_export_to[1]"],
    ["empty metadata key", { namespace: { name: "c4", metadata: { "": "v" } } }, 'namespace.metadata[""]'],
    ["long metadata key", { namespace: { name: "c5", metadata: { ["k".repeat(129)]: "v" } } }, `namespace.metadata["${"k".repeat(129)}"]`],
    ["long metadata value", { namespace: { name: "c6", metadata: { k: "v".repeat(4097) } } }, 'namespace.metadata["k"]'],
    [
      "too many metadata entries",
      { namespace: { name: "c7", metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, "v"])) } },
      "namespace.metadata",
    ],
    ["empty user id", { namespace: { name: "c8", userIds: [""] } }, "namespace.user_ids[0]"],
  ])("rejects %s with INVALID_ARGUMENT naming the field", async (_label, request, field) => {
    const error = await failure(t.admin.namespaces.createNamespace(request));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toContain(field);
    expect(error.message).toContain(field);
  });

  it("accepts a 64-character name of every allowed character", async () => {
    const name = "Az09-./:_".padEnd(64, "z");
    const { namespace } = await t.admin.namespaces.createNamespace({ namespace: { name } });
    expect(namespace!.name).toBe(name);
    const { namespace: got } = await t.admin.namespaces.getNamespace({ name });
    expect(got!.name).toBe(name);
  });

  it("reports every bad field at once", async () => {
    const error = await failure(
      t.admin.namespaces.createNamespace({ namespace: { name: "bad name", comment: "x".repeat(2000) } }),
    );
    expect(error.fieldViolations.map((v) => v.field).sort()).toEqual(["namespace.comment", "namespace.name"]);
  });
});

describe("GetNamespace", () => {
  it("returns the namespace without its token", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "get-me", comment: "c" } });
    const { namespace } = await t.admin.namespaces.getNamespace({ name: "get-me" });
    expect(namespace!.name).toBe("get-me");
    expect(namespace!.token).toBeUndefined();
    expect(namespace!.userIds).toEqual([]);
  });

  it("answers NOT_FOUND for an unknown name and INVALID_ARGUMENT for a malformed one", async () => {
    expect((await failure(t.admin.namespaces.getNamespace({ name: "nope" }))).code).toBe(Code.NOT_FOUND);
    const bad = await failure(t.admin.namespaces.getNamespace({ name: "no pe" }));
    expect(bad.code).toBe(Code.INVALID_ARGUMENT);
    expect(bad.fieldViolations[0]!.field).toBe("name");
  });
});

describe("ListNamespaces", () => {
  beforeAll(async () => {
    for (const [name, owners] of [
      ["list-alpha", "ann"],
      ["list-beta", "ann,bob"],
      ["list-gamma", "carl"],
      ["other-alpha", "dora"],
    ]) {
      await t.admin.namespaces.createNamespace({ namespace: { name, owners } });
    }
  });

  const names = async (request: Parameters<TestApp["admin"]["namespaces"]["listNamespaces"]>[0]) =>
    (await t.admin.namespaces.listNamespaces(request)).namespaces.map((n) => n.name);

  it("filters by name with exact, prefix, suffix and contains forms", async () => {
    expect(await names({ name: ["list-beta"] })).toEqual(["list-beta"]);
    expect((await names({ name: ["list-*"] })).sort()).toEqual(["list-alpha", "list-beta", "list-gamma"]);
    expect((await names({ name: ["*-alpha"] })).sort()).toEqual(["list-alpha", "other-alpha"]);
    expect((await names({ name: ["*amm*"] })).sort()).toEqual(["list-gamma"]);
    expect((await names({ name: ["list-beta", "*-gamma"] })).sort()).toEqual(["list-beta", "list-gamma"]);
  });

  it("filters by owner", async () => {
    expect((await names({ owner: ["ann"] })).sort()).toEqual(["list-alpha", "list-beta"]);
    expect((await names({ owner: ["bo*"] })).sort()).toEqual(["list-beta"]);
    expect((await names({ owner: ["ann"], name: ["*beta"] })).sort()).toEqual(["list-beta"]);
  });

  it("sorts newest modification first and never shows tokens", async () => {
    const { namespaces } = await t.admin.namespaces.listNamespaces({ name: ["list-*"] });
    const mtimes = namespaces.map((n) => n.mtime!);
    expect([...mtimes].sort().reverse()).toEqual(mtimes);
    for (const n of namespaces) expect(n.token).toBeUndefined();
    await t.admin.namespaces.updateNamespace({ namespace: { name: "list-alpha", comment: "touched" } });
    expect((await names({ name: ["list-*"] }))[0]).toBe("list-alpha");
  });

  it("pages with offset and limit and counts all matches", async () => {
    const page1 = await t.admin.namespaces.listNamespaces({ name: ["list-*"], limit: 2 });
    const page2 = await t.admin.namespaces.listNamespaces({ name: ["list-*"], limit: 2, offset: 2 });
    const past = await t.admin.namespaces.listNamespaces({ name: ["list-*"], limit: 2, offset: 50 });
    expect(page1.amount).toBe(3);
    expect(page1.namespaces).toHaveLength(2);
    expect(page2.namespaces).toHaveLength(1);
    expect(new Set([...page1.namespaces, ...page2.namespaces].map((n) => n.name)).size).toBe(3);
    expect(past).toEqual({ amount: 3, namespaces: [] });
  });

  it("defaults the limit to 100 and caps it at 100", async () => {
    await t.admin.namespaces.batchCreateNamespaces({
      namespaces: Array.from({ length: 100 }, (_, i) => ({ name: `bulk-${i}` })),
    });
    const all = await t.admin.namespaces.listNamespaces({});
    expect(all.namespaces).toHaveLength(100);
    expect(all.amount).toBeGreaterThan(100);
    expect((await t.admin.namespaces.listNamespaces({ limit: 500 })).namespaces).toHaveLength(100);
  });
});

describe("UpdateNamespace", () => {
  it("changes only the fields in the mask and replaces lists and maps whole", async () => {
    await t.admin.namespaces.createNamespace({
      namespace: { name: "upd", comment: "old", owners: "o1", serviceExportTo: ["a", "b"], metadata: { x: "1", y: "2" } },
    });
    const { namespace } = await t.admin.namespaces.updateNamespace({
      namespace: { name: "upd", comment: "ignored", serviceExportTo: ["c"], metadata: { z: "3" } },
      updateMask: ["service_export_to", "metadata"],
    });
    expect(namespace).toMatchObject({ comment: "old", owners: "o1", serviceExportTo: ["c"], metadata: { z: "3" } });
    expect(namespace!.mtime! >= namespace!.ctime!).toBe(true);
  });

  it("without a mask changes the fields that are present", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "upd2", comment: "old", owners: "o1" } });
    const { namespace } = await t.admin.namespaces.updateNamespace({ namespace: { name: "upd2", comment: "new" } });
    expect(namespace).toMatchObject({ comment: "new", owners: "o1" });
  });

  it("clears a map or turns the flag off when named in the mask", async () => {
    await t.admin.namespaces.createNamespace({
      namespace: { name: "upd3", metadata: { a: "b" }, syncToGlobalRegistry: true },
    });
    const { namespace } = await t.admin.namespaces.updateNamespace({
      namespace: { name: "upd3" },
      updateMask: ["metadata", "syncToGlobalRegistry"],
    });
    expect(namespace).toMatchObject({ metadata: {}, syncToGlobalRegistry: false });
  });

  it("refuses immutable and unknown mask paths", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "upd4" } });
    const error = await failure(
      t.admin.namespaces.updateNamespace({ namespace: { name: "upd4" }, updateMask: ["name", "bogus"] }),
    );
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["update_mask.paths[0]", "update_mask.paths[1]"]);
  });

  it("answers NOT_FOUND for a missing namespace", async () => {
    const error = await failure(t.admin.namespaces.updateNamespace({ namespace: { name: "ghost", comment: "x" } }));
    expect(error.code).toBe(Code.NOT_FOUND);
  });

  it("validates the new values", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "upd5" } });
    const error = await failure(
      t.admin.namespaces.updateNamespace({ namespace: { name: "upd5", comment: "x".repeat(1025) } }),
    );
    expect(error.fieldViolations[0]!.field).toBe("namespace.comment");
  });
});

describe("permissions", () => {
  it("lets owners, granted users and granted groups edit; others get PERMISSION_DENIED", async () => {
    const owner = await createAccountWithKey(t, ["namespaces"]);
    const stranger = await createAccountWithKey(t, ["namespaces"]);
    const friend = await createAccountWithKey(t, ["namespaces"]);
    const member = await createAccountWithKey(t, ["namespaces"], { groupIds: ["ops"] });
    const asOwner = t.client(owner.key).namespaces;
    await asOwner.createNamespace({ namespace: { name: "guarded" } });

    const seenByStranger = (await t.client(stranger.key).namespaces.getNamespace({ name: "guarded" })).namespace!;
    expect(seenByStranger).toMatchObject({ editable: false, deleteable: false });
    const denied = await failure(
      t.client(stranger.key).namespaces.updateNamespace({ namespace: { name: "guarded", comment: "x" } }),
    );
    expect(denied.code).toBe(Code.PERMISSION_DENIED);
    expect((await failure(t.client(stranger.key).namespaces.deleteNamespace({ name: "guarded" }))).code).toBe(
      Code.PERMISSION_DENIED,
    );
    expect((await failure(t.client(stranger.key).namespaces.getNamespaceToken({ name: "guarded" }))).code).toBe(
      Code.PERMISSION_DENIED,
    );

    await asOwner.updateNamespace({
      namespace: { name: "guarded", userIds: [friend.accountId], groupIds: ["ops"] },
      updateMask: ["user_ids", "group_ids"],
    });
    for (const key of [friend.key, member.key]) {
      const ns = (await t.client(key).namespaces.getNamespace({ name: "guarded" })).namespace!;
      expect(ns).toMatchObject({ editable: true, deleteable: true });
      await t.client(key).namespaces.updateNamespace({ namespace: { name: "guarded", comment: key } });
    }

    await asOwner.updateNamespace({
      namespace: { name: "guarded", removeUserIds: [friend.accountId] },
      updateMask: ["remove_user_ids"],
    });
    expect((await t.client(friend.key).namespaces.getNamespace({ name: "guarded" })).namespace!.editable).toBe(false);
    expect((await t.admin.namespaces.getNamespace({ name: "guarded" })).namespace!.editable).toBe(true);
  });
});

describe("DeleteNamespace", () => {
  it("deletes, and deleting a missing namespace succeeds", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "del" } });
    await t.admin.namespaces.deleteNamespace({ name: "del" });
    expect((await failure(t.admin.namespaces.getNamespace({ name: "del" }))).code).toBe(Code.NOT_FOUND);
    await t.admin.namespaces.deleteNamespace({ name: "del" });
  });

  it("refuses while the namespace has services, with FAILED_PRECONDITION", async () => {
    const { namespace } = await t.admin.namespaces.createNamespace({ namespace: { name: "busy" } });
    await t.app.db.insertInto("services").values({ namespace_id: namespace!.id!, name: "svc" }).execute();
    const error = await failure(t.admin.namespaces.deleteNamespace({ name: "busy" }));
    expect(error.code).toBe(Code.FAILED_PRECONDITION);
    expect(error.reason).toBe("NAMESPACE_HAS_SERVICES");
    await t.app.db.deleteFrom("services").where("namespace_id", "=", namespace!.id!).execute();
    await t.admin.namespaces.deleteNamespace({ name: "busy" });
  });
});

describe("counts", () => {
  it("reflect the services and instances tables", async () => {
    const { namespace } = await t.admin.namespaces.createNamespace({ namespace: { name: "counted" } });
    const service = await t.app.db
      .insertInto("services")
      .values({ namespace_id: namespace!.id!, name: "api" })
      .returning("id")
      .executeTakeFirstOrThrow();
    await t.app.db
      .insertInto("instances")
      .values([
        { service_id: service.id, host: "10.0.0.1", port: 80 },
        { service_id: service.id, host: "10.0.0.2", port: 80, healthy: false },
        { service_id: service.id, host: "10.0.0.3", port: 80, isolate: true },
      ])
      .execute();
    // Registration (a later capability) invalidates the cache itself; here a write does it.
    await t.admin.namespaces.updateNamespace({ namespace: { name: "counted", comment: "refresh" } });
    const { namespace: got } = await t.admin.namespaces.getNamespace({ name: "counted" });
    expect(got).toMatchObject({ totalServiceCount: 1, totalInstanceCount: 3, totalHealthInstanceCount: 1 });
  });
});

describe("tokens", () => {
  it("reads and rotates the token", async () => {
    const { namespace } = await t.admin.namespaces.createNamespace({ namespace: { name: "tok" } });
    const read = await t.admin.namespaces.getNamespaceToken({ name: "tok" });
    expect(read).toEqual({ name: "tok", token: namespace!.token });
    const rotated = await t.admin.namespaces.updateNamespaceToken({ name: "tok" });
    expect(rotated.token).toMatch(/^[0-9a-f]{32}$/);
    expect(rotated.token).not.toBe(namespace!.token);
    expect((await t.admin.namespaces.getNamespaceToken({ name: "tok" })).token).toBe(rotated.token);
  });

  it("answers NOT_FOUND for a missing namespace", async () => {
    expect((await failure(t.admin.namespaces.getNamespaceToken({ name: "ghost" }))).code).toBe(Code.NOT_FOUND);
    expect((await failure(t.admin.namespaces.updateNamespaceToken({ name: "ghost" }))).code).toBe(Code.NOT_FOUND);
  });
});

describe("batches", () => {
  it("creates item by item with one result each, in order", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "b-taken" } });
    const { results } = await t.admin.namespaces.batchCreateNamespaces({
      namespaces: [{ name: "b-one" }, { name: "b-taken" }, { name: "b bad" }, { name: "b-two" }],
    });
    expect(results.map((r) => r.status!.code)).toEqual([Code.OK, Code.ALREADY_EXISTS, Code.INVALID_ARGUMENT, Code.OK]);
    expect(results[0]!.namespace!.token).toMatch(/^[0-9a-f]{32}$/);
    expect(results[2]!.status!.message).toContain("namespaces[2].name");
    expect(results[1]!.namespace).toBeUndefined();
  });

  it("creates the first of two items with the same name, as it wrote it, and refuses the second", async () => {
    const [first, second] = [await createAccountWithKey(t, ["namespaces"]), await createAccountWithKey(t, ["namespaces"])];
    const { results } = await t.admin.namespaces.batchCreateNamespaces({
      namespaces: [
        { name: "b-twice", comment: "first", userIds: [first.accountId], serviceExportTo: ["a", "b"] },
        { name: "b-twice", comment: "second", userIds: [second.accountId] },
      ],
    });
    expect(results.map((r) => r.status!.code)).toEqual([Code.OK, Code.ALREADY_EXISTS]);
    const { namespace } = await t.admin.namespaces.getNamespace({ name: "b-twice" });
    expect(namespace).toMatchObject({ comment: "first", serviceExportTo: ["a", "b"] });
    expect((await t.admin.namespaces.getNamespaceToken({ name: "b-twice" })).token).toBe(results[0]!.namespace!.token);
    // Grants are write-only: they show as who may edit.
    expect((await t.client(first.key).namespaces.getNamespace({ name: "b-twice" })).namespace!.editable).toBe(true);
    expect((await t.client(second.key).namespaces.getNamespace({ name: "b-twice" })).namespace!.editable).toBe(false);
  });

  it("gives each of many concurrent creates its own row, grants and token, and one create per name", async () => {
    const callers = await Promise.all([0, 1, 2].map(() => createAccountWithKey(t, ["namespaces"])));
    const names = Array.from({ length: 10 }, (_, i) => `race-${i}`);
    // Three creates per name, each granting a different account, all in flight at once.
    const outcomes = await Promise.all(
      names.flatMap((name) =>
        callers.map((caller, i) =>
          t.admin.namespaces.createNamespace({ namespace: { name, comment: `by ${i}`, userIds: [caller.accountId] } }).then(
            (response) => ({ name, caller, created: response.namespace!, error: undefined }),
            (error: unknown) => ({ name, caller, created: undefined, error: error as ApiError }),
          ),
        ),
      ),
    );
    for (const name of names) {
      const tries = outcomes.filter((o) => o.name === name);
      const won = tries.filter((o) => o.created !== undefined);
      expect(won).toHaveLength(1);
      expect(tries.filter((o) => o.error?.code === Code.ALREADY_EXISTS)).toHaveLength(2);
      const { namespace } = await t.admin.namespaces.getNamespace({ name });
      expect(namespace!.comment).toBe(won[0]!.created!.comment);
      expect((await t.admin.namespaces.getNamespaceToken({ name })).token).toBe(won[0]!.created!.token);
      for (const { caller } of tries) {
        const { namespace: seen } = await t.client(caller.key).namespaces.getNamespace({ name });
        expect(seen!.editable).toBe(caller === won[0]!.caller);
      }
    }
  });

  it("deletes item by item", async () => {
    await t.admin.namespaces.createNamespace({ namespace: { name: "bd-1" } });
    const { results } = await t.admin.namespaces.batchDeleteNamespaces({ names: ["bd-1", "bd-missing", "bd bad"] });
    expect(results.map((r) => [r.name, r.status!.code])).toEqual([
      ["bd-1", Code.OK],
      ["bd-missing", Code.OK],
      ["bd bad", Code.INVALID_ARGUMENT],
    ]);
  });

  it("refuses an empty batch and one over 100 items", async () => {
    const empty = await failure(t.admin.namespaces.batchCreateNamespaces({ namespaces: [] }));
    expect(empty.fieldViolations[0]).toMatchObject({ field: "namespaces" });
    const big = await failure(
      t.admin.namespaces.batchDeleteNamespaces({ names: Array.from({ length: 101 }, (_, i) => `n${i}`) }),
    );
    expect(big.code).toBe(Code.INVALID_ARGUMENT);
    expect(big.fieldViolations[0]!.field).toBe("names");
  });
});

describe("auth on namespace calls", () => {
  it("needs a key, and a key with the namespaces scope", async () => {
    const anonymous = await failure(t.client().namespaces.listNamespaces({}));
    expect(anonymous.code).toBe(Code.UNAUTHENTICATED);
    expect((await failure(t.client("atr_not-a-key").namespaces.listNamespaces({}))).code).toBe(Code.UNAUTHENTICATED);
    const webhooksOnly = await createAccountWithKey(t, ["webhooks"]);
    const denied = await failure(t.client(webhooksOnly.key).namespaces.listNamespaces({}));
    expect(denied.code).toBe(Code.PERMISSION_DENIED);
    expect(denied.reason).toBe("MISSING_SCOPE");
  });
});

describe("request ids", () => {
  it("come back on failed calls too, matching the log line", async () => {
    const error = await failure(
      t.admin.namespaces.getNamespace({ name: "no-such" }, { metadata: { "x-request-id": "trace-abc.123" } }),
    );
    expect(error.responseMetadata.get("x-request-id")).toEqual(["trace-abc.123"]);
    const generated = await failure(t.admin.namespaces.getNamespace({ name: "no-such" }));
    const [id] = generated.responseMetadata.get("x-request-id");
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    expect(t.logs.some((l) => l.event === "rpc" && l.request_id === id && l.code === "NOT_FOUND")).toBe(true);
  });
});

describe("call logging", () => {
  it("writes one JSON line per call with method, code and duration", async () => {
    await t.admin.namespaces.getNamespace({ name: "logged-missing" }).catch(() => undefined);
    const line = t.logs.findLast((l) => l.event === "rpc" && l.method === "/v1.NamespaceService/GetNamespace");
    expect(line).toMatchObject({ transport: "grpc", code: "NOT_FOUND" });
    expect(typeof line!.duration_ms).toBe("number");
    expect(typeof line!.request_id).toBe("string");
  });
});
