import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { failure } from "./support/expect.js";
import { TRANSPORTS, type Transport } from "./support/faceswap.js";

// A small bound, so that pruning is reached with a handful of changes.
const LIMIT = 5;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase(), { NAMESPACE_HISTORY_LIMIT: String(LIMIT) });
});
afterAll(async () => {
  await t?.stop();
});

interface Change {
  field: string;
  before: string;
  after: string;
}
interface Entry {
  action: string;
  actor: string;
  accountId: string;
  time: string;
  changes: Change[];
}
type Page = { ok: true; entries: Entry[]; nextPageToken: string; raw: string } | { ok: false; grpcCode: number; httpStatus?: number; reason: string; fields: string[] };

/** ListNamespaceHistory over either transport, answered in one shape. */
async function history(transport: Transport, token: string, name: string, paging: { pageSize?: number; pageToken?: string } = {}): Promise<Page> {
  if (transport === "grpc") {
    try {
      const res = await t.client(token).namespaces.listNamespaceHistory({ name, pageSize: paging.pageSize ?? 0, pageToken: paging.pageToken ?? "" });
      return { ok: true, entries: res.entries, nextPageToken: res.nextPageToken, raw: JSON.stringify(res) };
    } catch (error) {
      const e = await failure(Promise.reject(error));
      return { ok: false, grpcCode: e.code, reason: e.reason ?? "", fields: e.fieldViolations.map((v) => v.field) };
    }
  }
  const query = new URLSearchParams();
  if (paging.pageSize !== undefined) query.set("page_size", String(paging.pageSize));
  if (paging.pageToken !== undefined) query.set("page_token", paging.pageToken);
  const res = await t.http("GET", `/v1/namespaces/${encodeURIComponent(name)}/history?${query}`, { token });
  if (res.status === 200) {
    const body = res.body as { entries?: Record<string, unknown>[]; next_page_token?: string };
    const entries = (body.entries ?? []).map((e) => ({
      action: e.action as string,
      actor: e.actor as string,
      accountId: (e.account_id as string | undefined) ?? "",
      time: e.time as string,
      changes: ((e.changes as Record<string, string>[] | undefined) ?? []).map((c) => ({ field: c.field!, before: c.before ?? "", after: c.after ?? "" })),
    }));
    return { ok: true, entries, nextPageToken: body.next_page_token ?? "", raw: JSON.stringify(res.body) };
  }
  const details = (res.body.details ?? []) as { "@type": string; reason?: string; field_violations?: { field: string }[] }[];
  return {
    ok: false,
    grpcCode: res.body.code,
    httpStatus: res.status,
    reason: details.find((d) => d.reason !== undefined)?.reason ?? "",
    fields: details.flatMap((d) => d.field_violations ?? []).map((v) => v.field),
  };
}

async function entriesOf(transport: Transport, token: string, name: string): Promise<Entry[]> {
  const page = await history(transport, token, name, { pageSize: 1000 });
  if (!page.ok) throw new Error(`history of ${name} failed: ${JSON.stringify(page)}`);
  return page.entries;
}

function changeOf(entry: Entry, field: string): { before: unknown; after: unknown } | undefined {
  const c = entry.changes.find((x) => x.field === field);
  return c && { before: c.before === "" ? undefined : JSON.parse(c.before), after: c.after === "" ? undefined : JSON.parse(c.after) };
}

describe.each(TRANSPORTS)("ListNamespaceHistory over %s", (transport) => {
  const n = (name: string) => `${transport}-${name}`;

  it("records no change for an update that sets the same metadata with its keys in another order", async () => {
    const owner = await createAccountWithKey(t, ["namespaces"]);
    const api = t.client(owner.key).namespaces;
    const name = n("same-metadata");
    // PostgreSQL keeps jsonb keys shortest first, so the stored order differs from either request's.
    await api.createNamespace({ namespace: { name, metadata: { zeta: "1", alpha: "2", mid: "3" } } });
    await api.updateNamespace({ namespace: { name, metadata: { alpha: "2", mid: "3", zeta: "1" } }, updateMask: ["metadata"] });
    expect((await entriesOf(transport, owner.key, name)).map((e) => e.action)).toEqual(["CREATED"]);
  });

  it("records create, update, grant changes, token rotation and delete with who, what and when", async () => {
    const owner = await createAccountWithKey(t, ["namespaces"]);
    const friend = await createAccountWithKey(t, ["namespaces"]);
    const api = t.client(owner.key).namespaces;
    const name = n("lifecycle");
    const { namespace } = await api.createNamespace({ namespace: { name, comment: "first", metadata: { team: "core" }, groupIds: ["ops"] } });
    await api.updateNamespace({ namespace: { name, comment: "second", userIds: [friend.accountId] }, updateMask: ["comment", "user_ids"] });
    await t.client(friend.key).namespaces.updateNamespace({ namespace: { name, removeGroupIds: ["ops"] }, updateMask: ["remove_group_ids"] });
    const { token: rotated } = await api.updateNamespaceToken({ name });

    const entries = await entriesOf(transport, owner.key, name);
    expect(entries.map((e) => e.action)).toEqual(["TOKEN_ROTATED", "UPDATED", "UPDATED", "CREATED"]);
    for (const e of entries) expect(e.time).toMatch(RFC3339);
    const times = entries.map((e) => Date.parse(e.time));
    expect([...times].sort((a, b) => b - a)).toEqual(times);

    const [rotation, grantRemoval, update, creation] = entries as [Entry, Entry, Entry, Entry];
    expect(creation).toMatchObject({ actor: owner.keyId, accountId: owner.accountId });
    expect(changeOf(creation, "comment")).toEqual({ before: undefined, after: "first" });
    expect(changeOf(creation, "owners")).toEqual({ before: undefined, after: owner.accountId });
    expect(changeOf(creation, "metadata")).toEqual({ before: undefined, after: { team: "core" } });
    expect(changeOf(creation, "group_ids")).toEqual({ before: undefined, after: ["ops"] });

    expect(update).toMatchObject({ actor: owner.keyId, accountId: owner.accountId });
    expect(update.changes.map((c) => c.field).sort()).toEqual(["comment", "user_ids"]);
    expect(changeOf(update, "comment")).toEqual({ before: "first", after: "second" });
    expect(changeOf(update, "user_ids")).toEqual({ before: [], after: [friend.accountId] });

    expect(grantRemoval).toMatchObject({ actor: friend.keyId, accountId: friend.accountId });
    expect(grantRemoval.changes.map((c) => c.field)).toEqual(["group_ids"]);
    expect(changeOf(grantRemoval, "group_ids")).toEqual({ before: ["ops"], after: [] });

    expect(rotation).toMatchObject({ actor: owner.keyId, accountId: owner.accountId });
    expect(rotation.changes).toEqual([{ field: "token", before: "", after: "" }]);

    // The token is never recorded, neither the first one nor the rotated one.
    const page = await history(transport, owner.key, name);
    expect(page.ok).toBe(true);
    const raw = page.ok ? page.raw : "";
    expect(raw).not.toContain(namespace!.token!);
    expect(raw).not.toContain(rotated);

    await api.deleteNamespace({ name });
    // Gone: its owner can no longer read it, an admin still can, by name, and sees who deleted it.
    const ownerAfter = await history(transport, owner.key, name);
    expect(ownerAfter).toMatchObject({ ok: false, grpcCode: Code.NOT_FOUND, reason: "NAMESPACE_NOT_FOUND" });
    const afterDelete = await entriesOf(transport, ADMIN_TOKEN, name);
    expect(afterDelete.map((e) => e.action)).toEqual(["DELETED", "TOKEN_ROTATED", "UPDATED", "UPDATED", "CREATED"]);
    expect(afterDelete[0]).toMatchObject({ actor: owner.keyId, accountId: owner.accountId, changes: [] });

    // A namespace created again under the name starts a history of its own.
    await api.createNamespace({ namespace: { name } });
    expect((await entriesOf(transport, owner.key, name)).map((e) => e.action)).toEqual(["CREATED"]);
  });

  it("records nothing for an update that changes nothing", async () => {
    const name = n("same");
    await t.admin.namespaces.createNamespace({ namespace: { name, comment: "same" } });
    await t.admin.namespaces.updateNamespace({ namespace: { name, comment: "same" }, updateMask: ["comment"] });
    expect((await entriesOf(transport, ADMIN_TOKEN, name)).map((e) => e.action)).toEqual(["CREATED"]);
  });

  it("records one entry per namespace of a batch create and a batch delete", async () => {
    const user = await createAccountWithKey(t, ["namespaces"]);
    const api = t.client(user.key).namespaces;
    const names = [n("batch-a"), n("batch-b"), n("batch-c")];
    const created = await api.batchCreateNamespaces({ namespaces: [...names.map((name) => ({ name })), { name: "bad name" }] });
    expect(created.results.filter((r) => r.namespace !== undefined)).toHaveLength(3);
    for (const name of names) {
      expect((await entriesOf(transport, user.key, name)).map((e) => [e.action, e.actor])).toEqual([["CREATED", user.keyId]]);
    }
    await api.batchDeleteNamespaces({ names });
    for (const name of names) {
      expect((await entriesOf(transport, ADMIN_TOKEN, name)).map((e) => [e.action, e.actor])).toEqual([
        ["DELETED", user.keyId],
        ["CREATED", user.keyId],
      ]);
    }
  });

  it("is readable by owners, granted users and groups and admins; not by others or a namespace token", async () => {
    const owner = await createAccountWithKey(t, ["namespaces"]);
    const granted = await createAccountWithKey(t, ["namespaces"]);
    const member = await createAccountWithKey(t, ["namespaces"], { groupIds: ["readers"] });
    const stranger = await createAccountWithKey(t, ["namespaces"]);
    const name = n("guarded");
    await t.client(owner.key).namespaces.createNamespace({ namespace: { name, userIds: [granted.accountId], groupIds: ["readers"] } });
    const { namespace: other } = await t.admin.namespaces.createNamespace({ namespace: { name: n("other") } });

    for (const key of [owner.key, granted.key, member.key, ADMIN_TOKEN]) {
      expect((await entriesOf(transport, key, name)).map((e) => e.action)).toEqual(["CREATED"]);
    }
    const denied = await history(transport, stranger.key, name);
    expect(denied).toMatchObject({ ok: false, grpcCode: Code.PERMISSION_DENIED, reason: "NAMESPACE_NOT_EDITABLE" });
    if (transport === "http") expect(denied).toMatchObject({ httpStatus: 403 });
    const byToken = await history(transport, other!.token!, name);
    expect(byToken).toMatchObject({ ok: false, grpcCode: Code.PERMISSION_DENIED });
  });

  it("pages newest first with page_size and page_token", async () => {
    const name = n("paged");
    await t.admin.namespaces.createNamespace({ namespace: { name, comment: "c0" } });
    for (const i of [1, 2, 3]) await t.admin.namespaces.updateNamespace({ namespace: { name, comment: `c${i}` }, updateMask: ["comment"] });

    const seen: string[] = [];
    let pageToken = "";
    const sizes: number[] = [];
    do {
      const page = await history(transport, ADMIN_TOKEN, name, { pageSize: 3, pageToken });
      if (!page.ok) throw new Error(JSON.stringify(page));
      sizes.push(page.entries.length);
      seen.push(...page.entries.map((e) => String(changeOf(e, "comment")!.after)));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    expect(sizes).toEqual([3, 1]);
    expect(seen).toEqual(["c3", "c2", "c1", "c0"]);
  });

  it(`keeps the newest ${LIMIT} entries, pruned in steps`, async () => {
    const name = n("bounded");
    await t.admin.namespaces.createNamespace({ namespace: { name, comment: "v0" } });
    // Pruning runs every LIMIT changes here (every 100 with a larger limit): the 10th change prunes.
    for (let i = 1; i < 2 * LIMIT; i++) {
      await t.admin.namespaces.updateNamespace({ namespace: { name, comment: `v${i}` }, updateMask: ["comment"] });
    }
    const entries = await entriesOf(transport, ADMIN_TOKEN, name);
    expect(entries.map((e) => changeOf(e, "comment")!.after)).toEqual(["v9", "v8", "v7", "v6", "v5"]);
    // Between prunes it may hold up to a step more than the bound, never more.
    for (let i = 10; i < 10 + LIMIT - 1; i++) {
      await t.admin.namespaces.updateNamespace({ namespace: { name, comment: `v${i}` }, updateMask: ["comment"] });
    }
    const grown = await entriesOf(transport, ADMIN_TOKEN, name);
    expect(grown.length).toBe(2 * LIMIT - 1);
    expect(changeOf(grown[0]!, "comment")!.after).toBe("v13");
  });

  it("answers bad inputs naming the field", async () => {
    const name = n("inputs");
    await t.admin.namespaces.createNamespace({ namespace: { name } });
    const cases: [{ name: string; pageSize?: number; pageToken?: string }, string][] = [
      [{ name, pageSize: -1 }, "page_size"],
      [{ name, pageToken: "not-a-token" }, "page_token"],
      [{ name, pageToken: Buffer.from(JSON.stringify(["x"])).toString("base64url") }, "page_token"],
      [{ name: "has space" }, "name"],
    ];
    for (const [input, field] of cases) {
      const res = await history(transport, ADMIN_TOKEN, input.name, input);
      expect(res, JSON.stringify(input)).toMatchObject({ ok: false, grpcCode: Code.INVALID_ARGUMENT, fields: [field] });
      if (transport === "http") expect(res).toMatchObject({ httpStatus: 400 });
    }
    const both = await history(transport, ADMIN_TOKEN, name, { pageSize: -5, pageToken: "%%%" });
    expect(both).toMatchObject({ ok: false, fields: ["page_size", "page_token"] });

    const user = await createAccountWithKey(t, ["namespaces"]);
    const unknown = await history(transport, user.key, n("never-existed"));
    expect(unknown).toMatchObject({ ok: false, grpcCode: Code.NOT_FOUND, reason: "NAMESPACE_NOT_FOUND" });
    if (transport === "http") expect(unknown).toMatchObject({ httpStatus: 404 });
    // An admin may read deleted namespaces, but there is no history of a name never used.
    const unknownToAdmin = await history(transport, ADMIN_TOKEN, n("never-existed"));
    expect(unknownToAdmin).toMatchObject({ ok: false, grpcCode: Code.NOT_FOUND, reason: "NAMESPACE_NOT_FOUND" });
  });
});
