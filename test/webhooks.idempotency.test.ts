import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { createLogger } from "../src/platform/logger.js";
import { WebhookRetention } from "../src/webhooks/retention.js";
import { createAccountWithKey } from "./support/accounts.js";
import { useTwoReplicas, type TestApp } from "./support/app.js";
import { failure, until } from "./support/expect.js";
import { Receiver } from "./support/receiver.js";

let a: TestApp;
let b: TestApp;
let receiver: Receiver;
let user: { accountId: string; key: string };

// Two replicas on one database: the key's claim must hold across them, not only within one process.
useTwoReplicas({ WEBHOOK_RETRY_BASE_MS: "100" }, (replicas) => ({ a, b } = replicas));

beforeAll(async () => {
  user = await createAccountWithKey(a, ["webhooks", "events:publish"]);
  receiver = await Receiver.start(() => "");
  await a.client(user.key).webhooks.createWebhook({ url: receiver.url, events: ["*"] });
});
afterAll(async () => {
  await receiver?.stop();
});

const api = (t: TestApp = a) => t.client(user.key).webhooks;

async function eventsWithKey(key: string) {
  return a.app.db
    .selectFrom("webhook_publish_keys")
    .innerJoin("webhook_events", "webhook_events.id", "webhook_publish_keys.event_id")
    .select(["webhook_events.id", "webhook_events.body", "webhook_publish_keys.created_at"])
    .where("key", "=", key)
    .execute();
}

function receivedFor(marker: string) {
  return receiver.received.filter((r) => r.body.data.marker === marker);
}

describe("PublishEvent with an idempotency_key", () => {
  it("answers the first event's id to a repeat and fans out nothing new", async () => {
    const first = await api().publishEvent({ event: "request.completed", data: { marker: "repeat" }, idempotencyKey: "order-1" });
    expect(first).toMatchObject({ deliveries: 1, replayed: false });
    const again = await api(b).publishEvent({ event: "request.completed", data: { marker: "repeat", n: 2 }, idempotencyKey: "order-1" });
    expect(again).toEqual({ eventId: first.eventId, deliveries: 0, replayed: true });
    await until(() => receivedFor("repeat").length === 1, 5_000, "the first event delivered");
    // Time for a wrongly queued second delivery to arrive.
    await sleep(300);
    expect(receivedFor("repeat")).toHaveLength(1);
    expect(receivedFor("repeat")[0]!.body.data).toEqual({ marker: "repeat" });
    expect(await eventsWithKey("order-1")).toHaveLength(1);
  });

  it("makes one event of simultaneous publishes with one key on two replicas", async () => {
    const calls = Array.from({ length: 24 }, (_, i) =>
      api(i % 2 === 0 ? a : b).publishEvent({ event: "request.completed", data: { marker: "race", i }, idempotencyKey: "race-key" }),
    );
    const results = await Promise.all(calls);
    const ids = new Set(results.map((r) => r.eventId));
    expect(ids.size).toBe(1);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);
    expect(results.filter((r) => !r.replayed)[0]!.deliveries).toBe(1);
    expect(results.filter((r) => r.replayed).every((r) => r.deliveries === 0)).toBe(true);
    const stored = await a.app.db.selectFrom("webhook_events").select("id").where("body", "like", '%"marker":"race"%').execute();
    expect(stored.map((e) => e.id)).toEqual([...ids]);
    await until(() => receivedFor("race").length === 1, 5_000, "the one event delivered");
    await sleep(300);
    expect(receivedFor("race")).toHaveLength(1);
  });

  it("keeps keys per account, and publishes without a key as before", async () => {
    const other = await createAccountWithKey(a, ["webhooks", "events:publish"]);
    const mine = await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "shared-name" });
    const theirs = await a.client(other.key).webhooks.publishEvent({ event: "request.completed", data: {}, idempotencyKey: "shared-name" });
    expect(theirs.eventId).not.toBe(mine.eventId);
    expect(theirs.replayed).toBe(false);
    const plain = await Promise.all([api().publishEvent({ event: "request.completed", data: {} }), api().publishEvent({ event: "request.completed", data: {} })]);
    expect(plain[0]!.eventId).not.toBe(plain[1]!.eventId);
    expect(plain.every((p) => p.deliveries === 1 && !p.replayed)).toBe(true);
  });

  it("lets a key expire after 24 hours, and prunes expired keys", async () => {
    const first = await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "old-key" });
    const kept = await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "young-key" });
    const hours = (h: number) => new Date(Date.now() - h * 3_600_000);
    await a.app.db.updateTable("webhook_publish_keys").set({ created_at: hours(25) }).where("key", "=", "old-key").execute();
    await a.app.db.updateTable("webhook_publish_keys").set({ created_at: hours(23) }).where("key", "=", "young-key").execute();
    // Expired but not yet pruned: the key is free again.
    const later = await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "old-key" });
    expect(later).toMatchObject({ deliveries: 1, replayed: false });
    expect(later.eventId).not.toBe(first.eventId);
    expect(await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "young-key" })).toMatchObject({
      eventId: kept.eventId,
      replayed: true,
    });

    await a.app.db.updateTable("webhook_publish_keys").set({ created_at: hours(25) }).where("key", "=", "old-key").execute();
    const retention = new WebhookRetention(a.app.db, createLogger("silent"), 30 * 86_400_000);
    expect((await retention.sweep()).keys).toBeGreaterThanOrEqual(1);
    const left = await a.app.db.selectFrom("webhook_publish_keys").select("key").where("key", "in", ["old-key", "young-key"]).execute();
    expect(left.map((k) => k.key)).toEqual(["young-key"]);
  });

  it.each([
    ["too long", "k".repeat(256)],
    ["a space", "two words"],
    ["a control character", "line\nbreak"],
    ["non-ASCII", "clé"],
  ])("refuses a key with %s, naming idempotency_key", async (_label, key) => {
    const error = await failure(api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: key }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["idempotency_key"]);
  });
});

describe("over HTTP", () => {
  const publish = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    a.http("POST", "/api/events", { token: user.key, body: { event: "request.completed", data: {}, ...body }, headers });

  it("takes the key from the Idempotency-Key header, the body, or both when they agree", async () => {
    const first = await publish({}, { "Idempotency-Key": "http-1" });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ deliveries: 1, replayed: false });
    for (const [body, headers] of [
      [{ idempotency_key: "http-1" }, {}],
      [{ idempotencyKey: "http-1" }, {}],
      [{ idempotency_key: "http-1" }, { "Idempotency-Key": "http-1" }],
      [{}, { "idempotency-key": "http-1" }],
    ] as const) {
      const again = await publish(body, headers);
      expect(again.status).toBe(200);
      expect(again.body).toEqual({ event_id: first.body.event_id, deliveries: 0, replayed: true });
    }
  });

  it("refuses a header and a body that disagree, and a bad header, naming idempotency_key", async () => {
    const mismatch = await publish({ idempotency_key: "body-key" }, { "Idempotency-Key": "header-key" });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.details[0].field_violations).toEqual([
      { field: "idempotency_key", description: "differs from the Idempotency-Key header; send one of them, or the same value in both" },
    ]);
    const tooLong = await publish({}, { "Idempotency-Key": "k".repeat(256) });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.details[0].field_violations[0].field).toBe("idempotency_key");
    expect(await eventsWithKey("body-key")).toEqual([]);
    expect(await eventsWithKey("header-key")).toEqual([]);
  });
});
