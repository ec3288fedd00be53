import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashApiKey } from "../src/auth/keys.js";
import { ApiError, Code } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase, query } from "./support/database.js";
import { failure } from "./support/expect.js";

let t: TestApp;

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
});
afterAll(async () => {
  await t?.stop();
});

const fields = (error: ApiError) => error.fieldViolations.map((v) => v.field);
const UNKNOWN_UUID = "00000000-0000-4000-8000-000000000000";

describe("CreateAccount", () => {
  it("creates an account with its groups (deduplicated) and a creation time", async () => {
    const before = Date.now();
    const { account } = await t.admin.admin.createAccount({ name: "  team a  ", groupIds: ["ops", "dev", "ops"] });
    expect(account!.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(account!.name).toBe("team a");
    expect(account!.groupIds).toEqual(["ops", "dev"]);
    expect(account!.createTime).toBeInstanceOf(Date);
    expect(Math.abs(account!.createTime!.getTime() - before)).toBeLessThan(60_000);
  });

  it.each([
    ["empty name", { name: "" }, ["name"]],
    ["blank name", { name: "   " }, ["name"]],
    ["too long name", { name: "x".repeat(201) }, ["name"]],
    ["empty group", { name: "ok", groupIds: ["a", ""] }, ["group_ids[1]"]],
    ["too many groups", { name: "ok", groupIds: Array.from({ length: 101 }, (_, i) => `g${i}`) }, ["group_ids"]],
    ["several bad fields", { name: "", groupIds: [" "] }, ["name", "group_ids[0]"]],
  ])("rejects %s with INVALID_ARGUMENT naming the field", async (_label, request, expected) => {
    const error = await failure(t.admin.admin.createAccount(request));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(fields(error)).toEqual(expected);
    for (const field of expected) expect(error.message).toContain(field);
  });

  it("writes nothing when the request is refused", async () => {
    const before = (await t.admin.admin.listAccounts({})).amount;
    await failure(t.admin.admin.createAccount({ name: "" }));
    expect((await t.admin.admin.listAccounts({})).amount).toBe(before);
  });
});

describe("ListAccounts", () => {
  it("pages newest first with offset and limit and counts every account", async () => {
    const created: string[] = [];
    for (let i = 0; i < 5; i++) created.push((await t.admin.admin.createAccount({ name: `pager-${i}` })).account!.id);

    const total = await t.app.db
      .selectFrom("accounts")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .executeTakeFirstOrThrow();
    const first = await t.admin.admin.listAccounts({ limit: 2 });
    expect(first.amount).toBe(total.n);
    expect(first.accounts).toHaveLength(2);
    // The newest two are the last two created here.
    expect(first.accounts.map((a) => a.id)).toEqual([created[4], created[3]]);

    const seen: string[] = [];
    for (let offset = 0; offset < first.amount; offset += 2) {
      const page = await t.admin.admin.listAccounts({ offset, limit: 2 });
      expect(page.amount).toBe(first.amount);
      seen.push(...page.accounts.map((a) => a.id));
    }
    expect(seen).toHaveLength(first.amount);
    expect(new Set(seen).size).toBe(first.amount);
    const times = (await t.admin.admin.listAccounts({})).accounts.map((a) => a.createTime!.getTime());
    expect([...times].sort((a, b) => b - a)).toEqual(times);

    const past = await t.admin.admin.listAccounts({ offset: first.amount + 10, limit: 2 });
    expect(past).toEqual({ amount: first.amount, accounts: [] });
  });

  it("defaults the page size to 100", async () => {
    const { amount } = await t.admin.admin.listAccounts({});
    for (let i = amount; i < 102; i++) await t.admin.admin.createAccount({ name: `filler-${i}` });
    const all = await t.admin.admin.listAccounts({});
    expect(all.amount).toBeGreaterThanOrEqual(102);
    expect(all.accounts).toHaveLength(100);
    expect((await t.admin.admin.listAccounts({ limit: 5000 })).accounts).toHaveLength(all.amount);
  });
});

describe("CreateApiKey", () => {
  it("returns the key once, prefixed atr_, and stores only its hash", async () => {
    const { account } = await t.admin.admin.createAccount({ name: "key owner" });
    const expireTime = new Date(Date.now() + 3_600_000);
    const created = await t.admin.admin.createApiKey({
      accountId: account!.id,
      name: "ci",
      scopes: ["namespaces", "webhooks", "namespaces"],
      expireTime,
    });
    expect(created.key).toMatch(/^atr_[A-Za-z0-9_-]{43}$/);
    expect(created.apiKey).toMatchObject({
      accountId: account!.id,
      name: "ci",
      scopes: ["namespaces", "webhooks"],
      prefix: created.key.slice(0, 12),
      revokeTime: undefined,
    });
    expect(created.apiKey!.expireTime!.getTime()).toBe(expireTime.getTime());
    expect(created.apiKey!.createTime).toBeInstanceOf(Date);

    // The key works for its scope.
    await t.client(created.key).namespaces.listNamespaces({});

    // Lists never show it, and the database holds only the hash.
    const listed = await t.admin.admin.listApiKeys({ accountId: account!.id });
    expect(listed.apiKeys.map((k) => k.id)).toEqual([created.apiKey!.id]);
    expect(JSON.stringify(listed)).not.toContain(created.key);
    expect(JSON.stringify(await t.admin.admin.listApiKeys({}))).not.toContain(created.key);
    const row = await t.app.db.selectFrom("api_keys").selectAll().where("id", "=", created.apiKey!.id).executeTakeFirstOrThrow();
    expect(row.key_hash).toBe(hashApiKey(created.key));
    expect(JSON.stringify(row)).not.toContain(created.key);

    // Two keys are never the same.
    const other = await t.admin.admin.createApiKey({ accountId: account!.id, name: "ci2", scopes: ["namespaces"] });
    expect(other.key).not.toBe(created.key);
    expect(other.apiKey!.expireTime).toBeUndefined();
  });

  it.each([
    ["an unknown scope", { name: "k", scopes: ["namespaces", "root"] }, ["scopes[1]"]],
    ["a bad first scope", { name: "k", scopes: ["superuser"] }, ["scopes[0]"]],
    ["no scope", { name: "k", scopes: [] }, ["scopes"]],
    ["an empty name", { name: "", scopes: ["admin"] }, ["name"]],
    ["a past expire_time", { name: "k", scopes: ["admin"], expireTime: new Date(Date.now() - 1000) }, ["expire_time"]],
  ])("rejects %s naming the field", async (_label, request, expected) => {
    const { account } = await t.admin.admin.createAccount({ name: "validation" });
    const error = await failure(t.admin.admin.createApiKey({ accountId: account!.id, ...request }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(fields(error)).toEqual(expected);
    expect(error.message).toContain(expected[0]);
    expect((await t.admin.admin.listApiKeys({ accountId: account!.id })).apiKeys).toEqual([]);
  });

  it("rejects a malformed account_id and answers NOT_FOUND for an unknown account", async () => {
    for (const accountId of ["", "not-a-uuid"]) {
      const error = await failure(t.admin.admin.createApiKey({ accountId, name: "k", scopes: ["admin"] }));
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      expect(fields(error)).toEqual(["account_id"]);
    }
    const missing = await failure(t.admin.admin.createApiKey({ accountId: UNKNOWN_UUID, name: "k", scopes: ["admin"] }));
    expect(missing.code).toBe(Code.NOT_FOUND);
    expect(missing.reason).toBe("ACCOUNT_NOT_FOUND");
    expect(missing.message).toContain(UNKNOWN_UUID);
  });

  it("reports every bad field at once", async () => {
    const error = await failure(
      t.admin.admin.createApiKey({ accountId: "x", name: "", scopes: ["bad"], expireTime: new Date(1000) }),
    );
    expect(fields(error).sort()).toEqual(["account_id", "expire_time", "name", "scopes[0]"]);
  });
});

describe("ListApiKeys", () => {
  it("lists keys of one account, newest first, or of every account", async () => {
    const { account: a } = await t.admin.admin.createAccount({ name: "lister a" });
    const { account: b } = await t.admin.admin.createAccount({ name: "lister b" });
    const a1 = await t.admin.admin.createApiKey({ accountId: a!.id, name: "a1", scopes: ["namespaces"] });
    const a2 = await t.admin.admin.createApiKey({ accountId: a!.id, name: "a2", scopes: ["faceswap"] });
    const b1 = await t.admin.admin.createApiKey({ accountId: b!.id, name: "b1", scopes: ["webhooks"] });

    const ofA = await t.admin.admin.listApiKeys({ accountId: a!.id });
    expect(ofA.apiKeys.map((k) => k.name)).toEqual(["a2", "a1"]);
    expect(ofA.apiKeys.every((k) => k.accountId === a!.id)).toBe(true);
    expect(ofA.apiKeys[0]).toMatchObject({ scopes: ["faceswap"], prefix: a2.key.slice(0, 12) });

    const all = (await t.admin.admin.listApiKeys({})).apiKeys.map((k) => k.id);
    expect(all).toEqual(expect.arrayContaining([a1.apiKey!.id, a2.apiKey!.id, b1.apiKey!.id]));
    expect(all.length).toBeGreaterThanOrEqual(4); // plus the bootstrap admin key

    expect((await t.admin.admin.listApiKeys({ accountId: UNKNOWN_UUID })).apiKeys).toEqual([]);
    const bad = await failure(t.admin.admin.listApiKeys({ accountId: "nope" }));
    expect(bad.code).toBe(Code.INVALID_ARGUMENT);
    expect(fields(bad)).toEqual(["account_id"]);
  });
});

describe("RevokeApiKey", () => {
  it("makes the key fail at once with API_KEY_REVOKED and keeps the first revoke time", async () => {
    const user = await createAccountWithKey(t, ["namespaces"]);
    const client = t.client(user.key);
    // Used first, so the key is in the authentication cache when it is revoked.
    await client.namespaces.listNamespaces({});
    await client.namespaces.listNamespaces({});

    const { apiKey } = await t.admin.admin.revokeApiKey({ keyId: user.keyId });
    expect(apiKey!.id).toBe(user.keyId);
    expect(apiKey!.revokeTime).toBeInstanceOf(Date);

    const error = await failure(client.namespaces.listNamespaces({}));
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.reason).toBe("API_KEY_REVOKED");

    const again = await t.admin.admin.revokeApiKey({ keyId: user.keyId });
    expect(again.apiKey!.revokeTime!.getTime()).toBe(apiKey!.revokeTime!.getTime());
    const listed = (await t.admin.admin.listApiKeys({ accountId: user.accountId })).apiKeys;
    expect(listed[0]!.revokeTime!.getTime()).toBe(apiKey!.revokeTime!.getTime());
  });

  it("revokes an admin key too", async () => {
    const admin = await createAccountWithKey(t, ["admin"]);
    await t.client(admin.key).admin.listAccounts({ limit: 1 });
    await t.admin.admin.revokeApiKey({ keyId: admin.keyId });
    const error = await failure(t.client(admin.key).admin.listAccounts({ limit: 1 }));
    expect(error.reason).toBe("API_KEY_REVOKED");
  });

  it("answers NOT_FOUND for an unknown or malformed id, and INVALID_ARGUMENT for none", async () => {
    for (const keyId of [UNKNOWN_UUID, "not-a-uuid"]) {
      const error = await failure(t.admin.admin.revokeApiKey({ keyId }));
      expect(error.code).toBe(Code.NOT_FOUND);
      expect(error.reason).toBe("API_KEY_NOT_FOUND");
    }
    const missing = await failure(t.admin.admin.revokeApiKey({ keyId: "" }));
    expect(missing.code).toBe(Code.INVALID_ARGUMENT);
    expect(missing.fieldViolations).toEqual([{ field: "key_id", description: "is required" }]);
  });
});

describe("expiry", () => {
  it("accepts a key until its expire_time, then answers API_KEY_EXPIRED", async () => {
    const expireTime = new Date(Date.now() + 1_500);
    const user = await createAccountWithKey(t, ["namespaces"], { expireTime });
    const client = t.client(user.key);
    await client.namespaces.listNamespaces({});
    await sleep(expireTime.getTime() - Date.now() + 100);
    const error = await failure(client.namespaces.listNamespaces({}));
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.reason).toBe("API_KEY_EXPIRED");
  });
});

describe("authentication and scopes", () => {
  it("answers UNAUTHENTICATED MISSING_CREDENTIALS without a key", async () => {
    const error = await failure(t.client().admin.listAccounts({}));
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.reason).toBe("MISSING_CREDENTIALS");
    expect(error.message).toContain("authorization");
  });

  it("answers MISSING_CREDENTIALS for a header that is not a bearer token", async () => {
    const error = await failure(
      t.client().admin.listAccounts({}, { metadata: { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` } }),
    );
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.reason).toBe("MISSING_CREDENTIALS");
  });

  it("answers INVALID_API_KEY for an unknown key", async () => {
    const error = await failure(t.client("atr_this-key-does-not-exist").admin.listAccounts({}));
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.reason).toBe("INVALID_API_KEY");
  });

  it("refuses every admin RPC to keys without the admin scope", async () => {
    const user = await createAccountWithKey(t, ["namespaces", "webhooks", "faceswap", "events:publish"]);
    const admin = t.client(user.key).admin;
    const calls: (() => Promise<unknown>)[] = [
      () => admin.createAccount({ name: "sneaky" }),
      () => admin.listAccounts({}),
      () => admin.createApiKey({ accountId: user.accountId, name: "escalate", scopes: ["admin"] }),
      () => admin.listApiKeys({}),
      () => admin.revokeApiKey({ keyId: user.keyId }),
    ];
    for (const call of calls) {
      const error = await failure(call());
      expect(error.code).toBe(Code.PERMISSION_DENIED);
      expect(error.reason).toBe("MISSING_SCOPE");
    }
    // Nothing happened: the key still works and no admin key was made for the account.
    await t.client(user.key).namespaces.listNamespaces({});
    const keys = (await t.admin.admin.listApiKeys({ accountId: user.accountId })).apiKeys;
    expect(keys.map((k) => k.scopes)).toEqual([["namespaces", "webhooks", "faceswap", "events:publish"]]);
  });

  it("lets a created admin key use the admin RPCs", async () => {
    const admin = await createAccountWithKey(t, ["admin"]);
    const { account } = await t.client(admin.key).admin.createAccount({ name: "made by a second admin" });
    expect(account!.name).toBe("made by a second admin");
  });
});

describe("bootstrap", () => {
  it("turns ADMIN_TOKEN into a working admin key, logged without the secret, once", async () => {
    const logged = t.logs.filter((l) => l.event === "bootstrap_admin_key");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ from: "ADMIN_TOKEN" });
    expect(logged[0]!.key).toBeUndefined();
    expect(JSON.stringify(t.logs)).not.toContain(ADMIN_TOKEN);
    await t.admin.admin.listAccounts({ limit: 1 });
    // Lists show a quarter of a token the operator chose: 12 characters of a 16-character one left 4 to guess.
    const listed = (await t.admin.admin.listApiKeys({ accountId: logged[0]!.account_id as string })).apiKeys[0]!;
    expect(ADMIN_TOKEN).toHaveLength(27);
    expect(listed.prefix).toBe("test-a");
  });

  it("generates and logs one admin key on an empty database without ADMIN_TOKEN, and only once", async () => {
    const url = await createTestDatabase();
    const first = await startTestApp(url, { ADMIN_TOKEN: "" });
    let key: string;
    try {
      const logged = first.logs.filter((l) => l.event === "bootstrap_admin_key");
      expect(logged).toHaveLength(1);
      key = logged[0]!.key as string;
      expect(key).toMatch(/^atr_/);
      expect(logged[0]!.level).toBe("warn");

      // ADMIN_TOKEN is not a key here.
      expect((await failure(first.admin.admin.listAccounts({}))).reason).toBe("INVALID_API_KEY");
      const accounts = await first.client(key).admin.listAccounts({});
      expect(accounts.amount).toBe(1);
      expect(accounts.accounts[0]!.name).toBe("admin");
      const keys = (await first.client(key).admin.listApiKeys({})).apiKeys;
      expect(keys).toHaveLength(1);
      expect(keys[0]).toMatchObject({ scopes: ["admin"], prefix: key.slice(0, 12) });
    } finally {
      await first.stop();
    }

    const second = await startTestApp(url, { ADMIN_TOKEN: "" });
    try {
      expect(second.logs.filter((l) => l.event === "bootstrap_admin_key")).toEqual([]);
      expect(second.logs.some((l) => l.event === "started")).toBe(true);
      const keys = (await second.client(key).admin.listApiKeys({})).apiKeys;
      expect(keys).toHaveLength(1);
      expect((await second.client(key).admin.listAccounts({})).amount).toBe(1);
    } finally {
      await second.stop();
    }
  });

  it("does not add a second ADMIN_TOKEN key when restarted on the same database, and lists the one it made as keys are listed now", async () => {
    const url = await createTestDatabase();
    const first = await startTestApp(url);
    await first.stop();
    // As it was stored before lists showed a quarter of such a token.
    await query(url, "update api_keys set prefix = $1", [ADMIN_TOKEN.slice(0, 12)]);
    const second = await startTestApp(url);
    try {
      expect(second.logs.filter((l) => l.event === "bootstrap_admin_key")).toEqual([]);
      const keys = (await second.admin.admin.listApiKeys({})).apiKeys;
      expect(keys).toHaveLength(1);
      expect(keys[0]!.prefix).toBe("test-a");
    } finally {
      await second.stop();
    }
  });
});

describe("bootstrap of replicas starting together", () => {
  it("creates exactly one admin key when several replicas start at once on an empty database", async () => {
    const url = await createTestDatabase();
    const apps = await Promise.all([1, 2, 3].map(() => startTestApp(url, { ADMIN_TOKEN: "" })));
    try {
      const logged = apps.flatMap((app) => app.logs.filter((l) => l.event === "bootstrap_admin_key"));
      expect(logged).toHaveLength(1);
      const key = logged[0]!.key as string;
      for (const app of apps) expect((await app.client(key).admin.listApiKeys({})).apiKeys).toHaveLength(1);
    } finally {
      await Promise.all(apps.map((app) => app.stop()));
    }
  });
});
