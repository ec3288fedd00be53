import { sql } from "kysely";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import * as repo from "../src/webhooks/repository.js";
import { createAccountWithKey } from "./support/accounts.js";
import { ADMIN_TOKEN, startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { Receiver } from "./support/receiver.js";
import { failure, until } from "./support/expect.js";
import { rolledBack } from "./support/transactions.js";

let t: TestApp;
let user: { accountId: string; key: string };
let receivers: Receiver[] = [];
let secret = "";

// Short backoff and timeout so retries and timeouts show within a test.
const env = { WEBHOOK_RETRY_BASE_MS: "100", WEBHOOK_TIMEOUT_MS: "1000" };

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase(), env);
  user = await createAccountWithKey(t, ["webhooks", "events:publish"]);
});
afterAll(async () => {
  await t?.stop();
});
afterEach(async () => {
  await Promise.all(receivers.map((r) => r.stop()));
  receivers = [];
});

async function receiver(): Promise<Receiver> {
  const r = await Receiver.start(() => secret);
  receivers.push(r);
  return r;
}

const api = () => t.client(user.key).webhooks;

describe("management", () => {
  it("creates with defaults: events ['*'], a generated whsec_ secret, enabled", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/hook", description: "ops" });
    expect(webhook).toMatchObject({
      url: "http://127.0.0.1:9/hook",
      events: ["*"],
      enabled: true,
      description: "ops",
      failureCount: 0,
      lastStatus: 0,
      status: "active",
    });
    expect(webhook!.secret).toMatch(/^whsec_[0-9a-f]{48}$/);
    expect(webhook!.id).toMatch(/^[0-9a-f-]{36}$/);

    const listed = (await api().listWebhooks({})).webhooks.find((w) => w.id === webhook!.id)!;
    expect(listed.secret).toBe(`${webhook!.secret.slice(0, 10)}...`);
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook!.secret).toBe(webhook!.secret);
  });

  it("keeps a given secret and events", async () => {
    const { webhook } = await api().createWebhook({
      url: "http://127.0.0.1:9/x",
      secret: "my-own-secret-0123456789",
      events: ["request.completed", "quota.exceeded", "request.completed"],
    });
    expect(webhook).toMatchObject({ secret: "my-own-secret-0123456789", events: ["request.completed", "quota.exceeded"] });
    // Lists show ten characters of it, an emoji whole.
    const emoji = await api().createWebhook({ url: "http://127.0.0.1:9/x", secret: `a${"😀".repeat(20)}` });
    const listed = (await api().listWebhooks({})).webhooks.find((w) => w.id === emoji.webhook!.id)!;
    expect(listed.secret).toBe(`a${"😀".repeat(9)}...`);
  });

  it.each([
    ["missing url", { url: "" }, "url"],
    ["ftp url", { url: "ftp://example.com/x" }, "url"],
    ["credentials in url", { url: "http://user:pw@127.0.0.1/x" }, "url"],
    ["long url", { url: `http://127.0.0.1/${"a".repeat(2000)}` }, "url"],
    ["bad event", { url: "http://127.0.0.1/x", events: ["Request Completed"] }, "events[0]"],
    ["too many events", { url: "http://127.0.0.1/x", events: Array.from({ length: 65 }, (_, i) => `a.e${i}`) }, "events"],
    ["long description", { url: "http://127.0.0.1/x", description: "d".repeat(1001) }, "description"],
    ["short secret", { url: "http://127.0.0.1/x", secret: "short" }, "secret"],
    ["long secret", { url: "http://127.0.0.1/x", secret: "s".repeat(501) }, "secret"],
  ])("rejects %s naming the field", async (_label, request, field) => {
    const error = await failure(api().createWebhook(request));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toContain(field);
  });

  it("updates the fields sent; re-enabling resets failure_count", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/u" });
    const id = webhook!.id;
    const updated = await api().updateWebhook({ webhookId: id, description: "new", events: ["request.failed"] });
    expect(updated.webhook).toMatchObject({ description: "new", events: ["request.failed"], url: webhook!.url, secret: webhook!.secret });

    await t.app.db.updateTable("webhooks").set({ failure_count: 7, enabled: false }).where("id", "=", id).execute();
    expect((await api().getWebhook({ webhookId: id })).webhook).toMatchObject({ status: "inactive", failureCount: 7 });
    const enabled = await api().updateWebhook({ webhookId: id, enabled: true });
    expect(enabled.webhook).toMatchObject({ enabled: true, failureCount: 0, status: "active" });

    const bad = await failure(api().updateWebhook({ webhookId: id, secret: "tiny" }));
    expect(bad.fieldViolations[0]!.field).toBe("secret");
  });

  it("deletes, and answers NOT_FOUND for unknown, malformed and other accounts' ids", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/d" });
    const stranger = await createAccountWithKey(t, ["webhooks"]);
    expect((await failure(t.client(stranger.key).webhooks.getWebhook({ webhookId: webhook!.id }))).code).toBe(Code.NOT_FOUND);
    expect((await t.client(stranger.key).webhooks.listWebhooks({})).webhooks).toEqual([]);
    await api().deleteWebhook({ webhookId: webhook!.id });
    expect((await failure(api().getWebhook({ webhookId: webhook!.id }))).code).toBe(Code.NOT_FOUND);
    expect((await failure(api().deleteWebhook({ webhookId: "nope" }))).code).toBe(Code.NOT_FOUND);
    // Left out, the id is named as missing, not looked for.
    for (const call of [api().getWebhook({ webhookId: "" }), api().listDeliveries({ webhookId: "" }), api().deleteWebhook({ webhookId: "" })]) {
      const missing = await failure(call);
      expect(missing.code).toBe(Code.INVALID_ARGUMENT);
      expect(missing.fieldViolations).toEqual([{ field: "webhook_id", description: "is required" }]);
    }
    // Named with the request's other problems, not instead of them.
    const both = await failure(api().resendDelivery({ webhookId: "", deliveryId: "" }));
    expect(both.fieldViolations.map((v) => v.field)).toEqual(["webhook_id", "delivery_id"]);
    const update = await failure(api().updateWebhook({ webhookId: "", description: "d".repeat(1_001) }));
    expect(update.fieldViolations.map((v) => v.field)).toEqual(["description", "webhook_id"]);
  });

  it("has the database refuse a kind, signature scheme or retry schedule the service does not know", async () => {
    const valid = {
      accountId: user.accountId,
      url: "https://example.com/hook",
      events: ["*"],
      secret: "whsec_0123456789abcdef0123456789abcdef",
      description: "",
      kind: "generic",
      settings: {},
      signatureScheme: "seed",
      retrySchedule: "seed",
    } as const;
    for (const bad of [{ kind: "fax" }, { signatureScheme: "rot13" }, { retrySchedule: "never" }]) {
      const error = await repo.insertWebhook(t.app.db, { ...valid, ...bad } as unknown as Parameters<typeof repo.insertWebhook>[1]).catch((e: unknown) => e);
      expect((error as { code?: string }).code).toBe("23514");
    }
  });

  it("validates URLs: valid, invalid_url, and blocked_private when private targets are not allowed", async () => {
    expect(await api().validateUrl({ url: "http://127.0.0.1:8080/x" })).toEqual({ valid: true, reason: "" });
    expect(await api().validateUrl({ url: "gopher://x" })).toEqual({ valid: false, reason: "invalid_url" });
    const strict = await startTestApp(await createTestDatabase(), { WEBHOOK_ALLOW_PRIVATE: "false" });
    try {
      for (const url of ["http://127.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/", "http://localhost/"]) {
        expect(await strict.admin.webhooks.validateUrl({ url })).toEqual({ valid: false, reason: "blocked_private" });
      }
      const created = await failure(strict.admin.webhooks.createWebhook({ url: "http://10.0.0.1/hook" }));
      expect(created.code).toBe(Code.INVALID_ARGUMENT);
      expect(created.reason).toBe("BLOCKED_PRIVATE");
      expect(created.fieldViolations[0]!.field).toBe("url");
    } finally {
      await strict.stop();
    }
  });

  it("needs a key with the webhooks scope; publishing needs events:publish", async () => {
    expect((await failure(t.client().webhooks.listWebhooks({}))).code).toBe(Code.UNAUTHENTICATED);
    const namespacesOnly = await createAccountWithKey(t, ["namespaces"]);
    expect((await failure(t.client(namespacesOnly.key).webhooks.listWebhooks({}))).code).toBe(Code.PERMISSION_DENIED);
    const webhooksOnly = await createAccountWithKey(t, ["webhooks"]);
    const denied = await failure(t.client(webhooksOnly.key).webhooks.publishEvent({ event: "request.completed" }));
    expect(denied.code).toBe(Code.PERMISSION_DENIED);
    expect(denied.message).toContain("events:publish");
  });

  it("takes event names of at most 128 characters, publishing and subscribing; an account id in capitals is the same account", async () => {
    const long = `a.${"b".repeat(127)}`;
    const publish = await failure(api().publishEvent({ event: long }));
    expect(publish.fieldViolations).toEqual([{ field: "event", description: "must be at most 128 characters" }]);
    const subscribe = await failure(api().createWebhook({ url: "http://127.0.0.1:9/long", events: ["request.completed", long] }));
    expect(subscribe.fieldViolations).toEqual([{ field: "events[1]", description: "must be at most 128 characters" }]);
    expect((await api().publishEvent({ event: long.slice(0, 128) })).eventId).toBeTruthy();
    expect((await api().publishEvent({ event: "request.completed", accountId: user.accountId.toUpperCase() })).eventId).toBeTruthy();
  });
});

describe("over HTTP, at the /api/webhooks paths", () => {
  it("serves every endpoint with the auth_token cookie and answers 401 without credentials", async () => {
    const cookie = { cookie: `auth_token=${user.key}` };
    expect((await t.http("GET", "/api/webhooks")).status).toBe(401);
    const created = await t.http("POST", "/api/webhooks", {
      headers: cookie,
      body: { url: "http://127.0.0.1:9/http", events: ["request.completed"] },
    });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ url: "http://127.0.0.1:9/http", events: ["request.completed"], enabled: true, failure_count: 0 });
    const id = created.body.id as string;
    expect((await t.http("GET", `/api/webhooks/${id}`, { headers: cookie })).body.secret).toBe(created.body.secret);
    const listed = await t.http("GET", "/api/webhooks", { headers: cookie });
    expect(listed.body.webhooks.find((w: { id: string }) => w.id === id).secret).toMatch(/^whsec_[0-9a-f]{4}\.\.\.$/);
    const put = await t.http("PUT", `/api/webhooks/${id}`, { headers: cookie, body: { enabled: false } });
    expect(put.body).toMatchObject({ enabled: false, status: "inactive" });
    expect((await t.http("POST", "/api/webhooks/validate-url", { headers: cookie, body: { url: "nope" } })).body).toEqual({
      valid: false,
      reason: "invalid_url",
    });
    const deliveries = await t.http("GET", `/api/webhooks/${id}/deliveries?limit=101`, { headers: cookie });
    expect(deliveries.status).toBe(400);
    expect(deliveries.body.details[0].field_violations[0].field).toBe("limit");
    expect((await t.http("DELETE", `/api/webhooks/${id}`, { headers: cookie })).status).toBe(200);
    expect((await t.http("GET", `/api/webhooks/${id}`, { token: ADMIN_TOKEN })).status).toBe(404);
  });
});

describe("dashboard login", () => {
  it("refuses a login posted from another site, and accepts its own", async () => {
    const form = { "content-type": "application/x-www-form-urlencoded" };
    const foreign = await t.http("POST", "/dashboard/webhooks/login", {
      headers: { ...form, origin: "https://evil.example" },
      body: `token=${encodeURIComponent(user.key)}`,
    });
    expect(foreign.status).toBe(403);
    expect(foreign.headers.get("set-cookie")).toBeNull();
    const own = await fetch(`${t.httpUrl}/dashboard/webhooks/login`, {
      method: "POST",
      redirect: "manual",
      headers: { ...form, origin: t.httpUrl },
      body: `token=${encodeURIComponent(user.key)}`,
    });
    expect(own.status).toBe(303);
    expect(own.headers.get("set-cookie")).toContain("HttpOnly; SameSite=Strict");
  });

  it("answers HEAD for the page as GET does, without a body", async () => {
    const head = await fetch(`${t.httpUrl}/dashboard/webhooks`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toContain("text/html");
    expect(await head.text()).toBe("");
  });
});

describe("deliveries", () => {
  // A fresh account, so no webhook of the management tests takes part.
  beforeAll(async () => {
    user = await createAccountWithKey(t, ["webhooks", "events:publish"]);
  });

  it("sends the event, signed, with exactly the receiver-facing headers (X-Webhook-Event, -Signature, -Timestamp, -Id)", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    secret = webhook!.secret;
    const data = { trace_id: "t-1", api_key_id: "k", provider: "p", model: "m", status: 200, tokens_in: 3, tokens_out: 5, cost_usd: 0.25, extra: { nested: [1, "x"] } };
    const published = await api().publishEvent({ event: "request.completed", data });
    expect(published.deliveries).toBe(1);

    const [got] = await r.waitFor(1);
    expect(got!.signatureValid).toBe(true);
    expect(got!.headers["content-type"]).toBe("application/json");
    expect(got!.headers["user-agent"]).toBe("Service-Webhook/1.0");
    expect(got!.headers["x-webhook-event"]).toBe("request.completed");
    expect(got!.headers["x-webhook-signature"]).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(got!.headers["x-webhook-timestamp"]).toBe(got!.body.timestamp);
    expect(got!.headers["x-webhook-id"]).toMatch(/^[0-9a-f-]{36}$/);
    expect(got!.body).toEqual({ event: "request.completed", timestamp: expect.any(String), data });
    expect(Date.parse(got!.body.timestamp)).toBeGreaterThan(Date.now() - 10_000);

    await until(async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries.length === 1);
    const [attempt] = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    expect(attempt).toMatchObject({ deliveryId: got!.headers["x-webhook-id"], event: "request.completed", attempt: 1, status: 200, success: true, responseBody: "ok" });
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ lastStatus: 200, failureCount: 0, status: "active" });
  });

  it("inserts up to the hand-off limit of a publish's deliveries already claimed, the others pending and unclaimed", async () => {
    const owner = await createAccountWithKey(t, ["webhooks"]);
    const { webhook } = await t.client(owner.key).webhooks.createWebhook({ url: "http://127.0.0.1:9/hand-off", events: ["request.completed"] });
    const event = { accountId: owner.accountId, name: "request.completed", body: "{}", occurredAt: new Date() };
    const publish = (limit: number) =>
      rolledBack(t.app.db, async (db) => {
        const batch = await repo.insertEventsWithDeliveries(db, [event], { limit, leaseMs: 60_000 });
        const rows = await db
          .selectFrom("webhook_deliveries")
          .select(["id", "attempts", "locked_until"])
          .where("event_id", "=", batch.stored[0]!.eventId)
          .execute();
        return { batch, rows, now: new Date() };
      });

    const handed = await publish(1);
    expect(handed.batch.stored).toEqual([{ eventId: expect.any(String), deliveries: 1, replayed: false }]);
    expect(handed.rows).toEqual([{ id: expect.any(String), attempts: 1, locked_until: expect.any(Date) }]);
    expect(handed.rows[0]!.locked_until!.getTime()).toBeGreaterThan(handed.now.getTime() + 50_000);
    expect(handed.batch.claimed).toEqual([
      expect.objectContaining({ id: handed.rows[0]!.id, webhook_id: webhook!.id, attempt: 1, url: webhook!.url, event: "request.completed" }),
    ]);

    const queued = await publish(0);
    expect(queued.batch.stored).toEqual([{ eventId: expect.any(String), deliveries: 1, replayed: false }]);
    expect(queued.batch.claimed).toEqual([]);
    expect(queued.rows).toEqual([{ id: expect.any(String), attempts: 0, locked_until: null }]);
  });

  it("matches subscriptions: '*', the event's name, never disabled webhooks or other accounts", async () => {
    const r = await receiver();
    const other = await createAccountWithKey(t, ["webhooks"]);
    const all = (await api().createWebhook({ url: `${r.url}?all`, events: ["*"] })).webhook!;
    await api().createWebhook({ url: `${r.url}?failed`, events: ["request.failed"] });
    await api().createWebhook({ url: `${r.url}?unknown`, events: ["some.future_event", "quota.exceeded"] });
    const off = (await api().createWebhook({ url: `${r.url}?off`, events: ["*"] })).webhook!;
    await api().updateWebhook({ webhookId: off.id, enabled: false });
    await t.client(other.key).webhooks.createWebhook({ url: `${r.url}?other`, events: ["*"] });
    secret = all.secret;
    const published = await api().publishEvent({ event: "quota.exceeded", data: { key: "k1" } });
    expect(published.deliveries).toBe(2);
    await r.waitFor(2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received.map((x) => x.path).sort()).toEqual(["/hook?all", "/hook?unknown"]);
  });

  it("retries 5xx after the backoff and succeeds, with one X-Webhook-Id throughout", async () => {
    const r = await receiver();
    r.reply = () => (r.received.length <= 2 ? 503 : 200);
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.failed"] });
    secret = webhook!.secret;
    await api().publishEvent({ event: "request.failed", data: {} });
    const got = await r.waitFor(3);
    expect(new Set(got.map((g) => g.headers["x-webhook-id"])).size).toBe(1);
    expect(got.every((g) => g.signatureValid && g.rawBody === got[0]!.rawBody)).toBe(true);
    // Backoff 1x then 2x the base (100 ms in this file).
    expect(got[1]!.at - got[0]!.at).toBeGreaterThanOrEqual(90);
    expect(got[2]!.at - got[1]!.at).toBeGreaterThanOrEqual(190);
    await until(async () => (await api().getWebhook({ webhookId: webhook!.id })).webhook!.lastStatus === 200);
    const history = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    expect(history.map((d) => [d.attempt, d.status, d.success])).toEqual([
      [3, 200, true],
      [2, 503, false],
      [1, 503, false],
    ]);
    expect(history[2]!.nextAttemptAt).toBeInstanceOf(Date);
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook!.failureCount).toBe(0);
  });

  it("gives up after 3 retries: failed, failure_count + 1, last_status recorded", async () => {
    const r = await receiver();
    r.reply = () => 500;
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.failed"] });
    secret = webhook!.secret;
    await api().publishEvent({ event: "request.failed", data: {} });
    await r.waitFor(4);
    await until(async () => (await api().getWebhook({ webhookId: webhook!.id })).webhook!.failureCount === 1);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(r.received).toHaveLength(4);
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ lastStatus: 500, failureCount: 1, status: "errored" });
  });

  it.each([
    ["3xx, without following the redirect", { status: 302, headers: { location: "/elsewhere" } }],
    ["4xx", { status: 404 }],
  ])("treats %s as final: no retry, failure_count + 1", async (_label, reply) => {
    const r = await receiver();
    r.reply = () => reply;
    const { webhook } = await api().createWebhook({ url: r.url, events: ["quota.exceeded"] });
    secret = webhook!.secret;
    await api().publishEvent({ event: "quota.exceeded", data: {} });
    await until(async () => (await api().getWebhook({ webhookId: webhook!.id })).webhook!.failureCount === 1);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(r.received.map((x) => x.headers["x-webhook-event"])).toEqual(["quota.exceeded"]);
    const [attempt] = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    expect(attempt).toMatchObject({ status: reply.status, success: false, attempt: 1 });
    expect(attempt!.nextAttemptAt).toBeUndefined();
  });

  it("times out a receiver that does not answer and retries with last_status 0", async () => {
    const r = await receiver();
    r.reply = () => (r.received.length === 1 ? "hang" : 200);
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    secret = webhook!.secret;
    await api().publishEvent({ event: "request.completed", data: {} });
    await r.waitFor(2, 5_000);
    const history = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    const first = history.find((d) => d.attempt === 1)!;
    expect(first).toMatchObject({ status: 0, success: false });
    expect(first.error).toContain("timeout");
  });

  it("delivers to the others promptly while one receiver hangs", async () => {
    const slow = await receiver();
    slow.reply = () => "hang";
    const fast = await Promise.all([receiver(), receiver(), receiver()]);
    const { webhook } = await api().createWebhook({ url: slow.url, events: ["video.started"] });
    for (const r of fast) await api().createWebhook({ url: r.url, events: ["video.started"], secret: webhook!.secret });
    secret = webhook!.secret;
    const started = Date.now();
    await api().publishEvent({ event: "video.started", data: { id: "v" } });
    await Promise.all(fast.map((r) => r.waitFor(1, 2_000)));
    expect(Date.now() - started).toBeLessThan(800);
    expect(fast.every((r) => r.received[0]!.signatureValid)).toBe(true);
  });

  it("disables a webhook after 10 failed deliveries; re-enabling resets the count", async () => {
    const r = await receiver();
    r.reply = () => 404;
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed.disable"] });
    secret = webhook!.secret;
    for (let i = 0; i < 10; i++) await api().publishEvent({ event: "request.completed.disable", data: { i } });
    await until(async () => !(await api().getWebhook({ webhookId: webhook!.id })).webhook!.enabled);
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ failureCount: 10, status: "inactive" });
    expect(t.logs.some((l) => l.event === "webhook_disabled" && l.webhook_id === webhook!.id)).toBe(true);

    // Disabled: new events queue nothing for it.
    const before = r.received.length;
    await api().publishEvent({ event: "request.completed.disable", data: {} });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received.length).toBe(before);

    r.reply = () => 200;
    expect((await api().updateWebhook({ webhookId: webhook!.id, enabled: true })).webhook).toMatchObject({ enabled: true, failureCount: 0 });
    await api().publishEvent({ event: "request.completed.disable", data: {} });
    await r.waitFor(before + 1);
  });
});

describe("the test endpoint", () => {
  it("sends one test.ping and reports the outcome", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    secret = webhook!.secret;
    expect(await api().testWebhook({ webhookId: webhook!.id })).toEqual({ delivered: true, status: 200, error: "" });
    expect(r.received).toHaveLength(1);
    expect(r.received[0]!.signatureValid).toBe(true);
    expect(r.received[0]!.body).toMatchObject({ event: "test.ping", data: { message: expect.any(String), webhookId: webhook!.id } });
    const [attempt] = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    expect(attempt).toMatchObject({ event: "test.ping", status: 200, success: true });
  });

  it("does not retry, and reports network errors", async () => {
    const r = await receiver();
    r.reply = () => 500;
    // Not "*": that would also hear of the account's other webhooks being disabled (earlier tests' receivers are gone).
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    secret = webhook!.secret;
    expect(await api().testWebhook({ webhookId: webhook!.id })).toEqual({ delivered: false, status: 500, error: "" });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(r.received).toHaveLength(1);
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ failureCount: 0, lastStatus: 500 });

    const dead = await api().createWebhook({ url: "http://127.0.0.1:9/closed" });
    const result = await api().testWebhook({ webhookId: dead.webhook!.id });
    expect(result).toMatchObject({ delivered: false, status: 0 });
    expect(result.error).toContain("ECONNREFUSED");
  });
});

describe("what receivers answer, and bodies that cannot be made", () => {
  it("records an answer holding NUL (which PostgreSQL's text refuses) with the NUL replaced, and reports the test delivered", async () => {
    const r = await receiver();
    r.reply = () => ({ status: 200, body: "a\u0000b" });
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    secret = webhook!.secret;
    expect(await api().testWebhook({ webhookId: webhook!.id })).toEqual({ delivered: true, status: 200, error: "" });
    await api().publishEvent({ event: "request.completed", data: { n: 1 } });
    const deliveries = async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    await until(async () => (await deliveries()).length === 2);
    for (const d of await deliveries()) expect(d).toMatchObject({ success: true, status: 200, responseBody: "a\ufffdb" });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received).toHaveLength(2);
  });

  it("records each outcome of a batch by itself when the database refuses what one holds, that one without the answer", async () => {
    // A trigger stands in for whatever a future answer might hold that the database refuses (a data exception).
    await sql`create function refuse_marked_attempt() returns trigger language plpgsql as $$
      begin if new.response_body = 'refuse me' then raise exception 'refused for the test' using errcode = '22000'; end if; return new; end $$`.execute(t.app.db);
    await sql`create trigger refuse_marked before insert on webhook_attempts for each row execute function refuse_marked_attempt()`.execute(t.app.db);
    try {
      const refused = await receiver();
      refused.reply = () => ({ status: 200, body: "refuse me" });
      const fine = await Promise.all([receiver(), receiver(), receiver()]);
      const event = "batch.refusal";
      const hooks = await Promise.all([refused, ...fine].map((r) => api().createWebhook({ url: r.url, events: [event] })));
      await api().publishEvent({ event, data: {} });
      for (const [i, r] of fine.entries()) {
        await r.waitFor(1);
        await until(async () => (await api().listDeliveries({ webhookId: hooks[i + 1]!.webhook!.id })).deliveries.length === 1);
      }
      const [refusedAttempt] = (await api().listDeliveries({ webhookId: hooks[0]!.webhook!.id })).deliveries;
      expect(refusedAttempt).toMatchObject({ success: true, status: 200, responseBody: "", error: "the answer could not be stored (refused for the test)" });
      await new Promise((resolve) => setTimeout(resolve, 300));
      for (const r of [refused, ...fine]) expect(r.received).toHaveLength(1);
    } finally {
      await sql`drop trigger refuse_marked on webhook_attempts`.execute(t.app.db);
      await sql`drop function refuse_marked_attempt()`.execute(t.app.db);
    }
  });

  it("fails for good, recorded and counted, a delivery whose custom body would be too large, instead of trying it again and again", async () => {
    const r = await receiver();
    const template = JSON.stringify(Array.from({ length: 200 }, () => "{{data}}"));
    const { webhook } = await api().createWebhook({ url: r.url, events: ["big.data"], kind: "custom", settings: { template } });
    await api().publishEvent({ event: "big.data", data: { text: "x".repeat(10_000) } });
    const deliveries = async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;
    await until(async () => (await deliveries()).length === 1);
    expect((await deliveries())[0]).toMatchObject({
      success: false,
      status: 0,
      error: "could not make the request: the template's placeholders make a body of more than 1048576 characters for this event",
      nextAttemptAt: undefined,
    });
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ failureCount: 1 });
    expect(r.received).toEqual([]);
  });
});

describe("history", () => {
  it("lists newest first with a default of 20 and keeps at most the configured number", async () => {
    const app = await startTestApp(await createTestDatabase(), { WEBHOOK_HISTORY_LIMIT: "5" });
    const r = await receiver();
    try {
      const { webhook } = await app.admin.webhooks.createWebhook({ url: r.url });
      secret = webhook!.secret;
      for (let i = 0; i < 12; i++) await app.admin.webhooks.testWebhook({ webhookId: webhook!.id });
      const list = async () => (await app.admin.webhooks.listDeliveries({ webhookId: webhook!.id, limit: 100 })).deliveries;
      // Trimmed every 5 attempts, after the attempt is recorded and not awaited by it: once the
      // trim after the tenth has run, never more than twice the limit, and always the newest.
      await until(async () => (await list()).length < 10, 10_000, "the history trimmed after the tenth attempt");
      const kept = await list();
      expect(kept.length).toBeGreaterThanOrEqual(5);
      expect(kept.length).toBeLessThan(10);
      const times = kept.map((d) => d.createdAt!.getTime());
      expect([...times].sort((a, b) => b - a)).toEqual(times);
      // A delivered delivery leaves with its last attempt: the table does not grow with every delivery ever made.
      const rows = await app.app.db.selectFrom("webhook_deliveries").select(["id", "state"]).where("webhook_id", "=", webhook!.id).execute();
      expect(rows.map((d) => d.id).sort()).toEqual(kept.map((d) => d.deliveryId).sort());
    } finally {
      await app.stop();
    }
  });

  it("trims to the newest attempts, keeping those recorded at the same instant as the oldest kept, and the deliveries still shown", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/hook", events: ["request.completed"] });
    const db = t.app.db;
    const event = await db
      .insertInto("webhook_events")
      .values({ account_id: user.accountId, name: "request.completed", body: "{}", occurred_at: new Date() })
      .returning("id")
      .executeTakeFirstOrThrow();
    // Six delivered deliveries, one attempt each; the third and fourth newest were recorded in one
    // statement, so at one instant. A seventh, failed, whose attempt is the oldest.
    const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
    const seconds = [1, 2, 3, 4, 4, 5, 6];
    const ids: string[] = [];
    for (const [i, s] of seconds.entries()) {
      const delivery = await db
        .insertInto("webhook_deliveries")
        .values({ event_id: event.id, webhook_id: webhook!.id, state: i === 0 ? "failed" : "delivered", attempts: 1 })
        .returning("id")
        .executeTakeFirstOrThrow();
      ids.push(delivery.id);
      await db
        .insertInto("webhook_attempts")
        .values({ delivery_id: delivery.id, webhook_id: webhook!.id, attempt: 1, status: i === 0 ? 500 : 200, success: i !== 0, latency_ms: 1, created_at: at(s) })
        .execute();
    }
    const left = async () => ({
      attempts: (await db.selectFrom("webhook_attempts").select("delivery_id").where("webhook_id", "=", webhook!.id).execute()).map((a) => a.delivery_id).sort(),
      deliveries: (await db.selectFrom("webhook_deliveries").select("id").where("webhook_id", "=", webhook!.id).execute()).map((d) => d.id).sort(),
    });

    // The fourth newest ties with the third: both stay.
    await repo.pruneHistory(db, webhook!.id, 3);
    expect(await left()).toEqual({ attempts: ids.slice(3).sort(), deliveries: [ids[0]!, ...ids.slice(3)].sort() });
    await repo.pruneHistory(db, webhook!.id, 2);
    expect(await left()).toEqual({ attempts: ids.slice(5).sort(), deliveries: [ids[0]!, ...ids.slice(5)].sort() });
    // More kept than there are: nothing goes.
    await repo.pruneHistory(db, webhook!.id, 10);
    expect((await left()).attempts).toHaveLength(2);
  });

  it("keeps failed deliveries whose attempts were trimmed, so recover still finds them", async () => {
    const app = await startTestApp(await createTestDatabase(), { WEBHOOK_HISTORY_LIMIT: "3", WEBHOOK_RETRY_BASE_MS: "1" });
    const r = await receiver();
    try {
      const since = new Date(Date.now() - 1000);
      const { webhook } = await app.admin.webhooks.createWebhook({ url: r.url, events: ["request.completed"] });
      secret = webhook!.secret;
      const failing = (await app.admin.webhooks.createWebhook({ url: "http://127.0.0.1:9/closed", events: ["request.completed"] })).webhook!;
      for (let n = 0; n < 7; n++) await app.admin.webhooks.publishEvent({ event: "request.completed", data: { n } });
      await until(() => r.received.length === 7, 10_000, "every delivery to the working receiver");
      await until(async () => (await stateCounts(app, failing.id)).failed === 7, 10_000, "the failing deliveries given up");
      await until(async () => (await stateCounts(app, webhook!.id)).delivered! < 7, 10_000, "delivered deliveries trimmed");
      // 7 deliveries of 4 attempts each, trimmed to the newest few: the oldest failures have no attempt
      // left. The trim runs after an attempt is recorded, so the last one may still be under way.
      const attempts = async () => (await app.app.db.selectFrom("webhook_attempts").select("id").where("webhook_id", "=", failing.id).execute()).length;
      await until(async () => (await attempts()) < 7, 10_000, "the failing webhook's attempts trimmed");
      expect(await app.admin.webhooks.recoverDeliveries({ webhookId: failing.id, since })).toEqual({ requeued: 7 });
    } finally {
      await app.stop();
    }
  });
});

async function stateCounts(app: TestApp, webhookId: string): Promise<Record<string, number>> {
  const rows = await app.app.db
    .selectFrom("webhook_deliveries")
    .select((eb) => ["state", eb.fn.countAll<number>().as("n")])
    .where("webhook_id", "=", webhookId)
    .groupBy("state")
    .execute();
  return { delivered: 0, failed: 0, pending: 0, ...Object.fromEntries(rows.map((r) => [r.state, Number(r.n)])) };
}
