import { setTimeout as sleep } from "node:timers/promises";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { Code } from "../src/platform/errors.js";
import type { DeliveryState } from "../src/platform/db/schema.js";
import { uuidv7 } from "../src/platform/ids.js";
import * as repo from "../src/webhooks/repository.js";
import { createLogger } from "../src/platform/logger.js";
import { WebhookRetention } from "../src/webhooks/retention.js";
import { failure, until } from "./support/expect.js";
import { heldOpen } from "./support/transactions.js";
import { useWebhookApp } from "./support/webhook-app.js";

const bed = useWebhookApp();
const { api, receiver } = bed;
const DAY_MS = 86_400_000;

async function count(table: "webhook_events" | "webhook_deliveries" | "webhook_attempts") {
  const row = await bed.t.app.db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
  return Number(row.n);
}

async function pendingOrInFlight() {
  const rows = await bed.t.app.db.selectFrom("webhook_deliveries").select(["state", "attempts", "locked_until"]).execute();
  return rows.filter((d) => d.state === "pending");
}

/** Attempts whose delivery is gone: nothing holds them to it but the statements that delete deliveries. */
async function orphanAttempts() {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from webhook_attempts a
    where not exists (select 1 from webhook_deliveries d where d.id = a.delivery_id)`.execute(bed.t.app.db);
  return rows[0]!.n;
}

/** Everything published so far has had its outcome: delivered, failed, or pending with a retry due much later. */
async function settled(expectedPending: number) {
  await until(
    async () => {
      const pending = await pendingOrInFlight();
      const deliveries = await count("webhook_deliveries");
      const attempts = await count("webhook_attempts");
      // Recorded, not only sent: a publish hands its delivery over already at attempt 1, and an
      // outcome recorded after the test moves a due time would move it back.
      return (
        pending.length === expectedPending && pending.every((d) => d.attempts >= 1 && d.locked_until === null) && attempts >= deliveries
      );
    },
    10_000,
    "deliveries settled",
  );
}

describe("retention", () => {
  it("deletes events past the retention with their deliveries and attempts, in steps, keeping pending work, recover and idempotency keys", async () => {
    const ok = await receiver();
    const down = await receiver();
    down.reply = () => 500;
    const held = await receiver();
    held.reply = () => ({ status: 503, headers: { "retry-after": "3600" } });
    const { webhook: delivered } = await api().createWebhook({ url: ok.url, events: ["request.completed"] });
    const { webhook: failing } = await api().createWebhook({ url: down.url, events: ["request.failed"] });
    await api().createWebhook({ url: held.url, events: ["quota.exceeded"], retrySchedule: "extended" });

    // Old: three delivered, two failed after their retries, one held back by Retry-After, one with no subscriber.
    for (let i = 0; i < 3; i++) await api().publishEvent({ event: "request.completed", data: { age: "old" } });
    for (let i = 0; i < 2; i++) await api().publishEvent({ event: "request.failed", data: { age: "old" } });
    const { eventId: heldEvent } = await api().publishEvent({ event: "quota.exceeded", data: { age: "old" } });
    await api().publishEvent({ event: "video.started", data: { age: "old" } });
    await settled(1);
    const boundary = new Date();
    await sleep(20);
    // Young: one delivered (with an idempotency key), one failed.
    const keyed = await api().publishEvent({ event: "request.completed", data: { age: "young" }, idempotencyKey: "young-1" });
    await api().publishEvent({ event: "request.failed", data: { age: "young" } });
    await settled(1);
    expect(await count("webhook_events")).toBe(9);
    expect(await count("webhook_deliveries")).toBe(8);

    // The young events were published after `boundary`: a sweep 30 days after it finds only the old ones.
    const retention = new WebhookRetention(bed.t.app.db, createLogger("silent"), 30 * DAY_MS, 2);
    const swept = await retention.sweep(new Date(boundary.getTime() + 30 * DAY_MS));
    expect(swept).toMatchObject({ events: 6, deliveries: 5 });
    expect(await count("webhook_events")).toBe(3);
    const left = await bed.t.app.db
      .selectFrom("webhook_deliveries as d")
      .innerJoin("webhook_events as e", "e.id", "d.event_id")
      .select(["e.body", "d.state"])
      .execute();
    expect(left.map((d) => [JSON.parse(d.body).data.age, d.state]).sort()).toEqual([
      ["old", "pending"],
      ["young", "delivered"],
      ["young", "failed"],
    ]);
    // Attempts went with their deliveries; the history shows only what is left.
    expect(await orphanAttempts()).toBe(0);
    expect(await count("webhook_attempts")).toBeGreaterThanOrEqual(3);
    expect((await api().listDeliveries({ webhookId: delivered!.id })).deliveries).toHaveLength(1);

    // Recover finds only the failure still kept: the old ones are gone.
    down.reply = () => 200;
    const before = down.received.length;
    expect(await api().recoverDeliveries({ webhookId: failing!.id, since: new Date(boundary.getTime() - 3_600_000) })).toEqual({ requeued: 1 });
    const [again] = (await down.waitFor(before + 1)).slice(before);
    expect(again!.body.data).toEqual({ age: "young" });
    // The young event's key still answers it.
    expect(await api().publishEvent({ event: "request.completed", data: {}, idempotencyKey: "young-1" })).toEqual({
      eventId: keyed.eventId,
      deliveries: 0,
      replayed: true,
    });

    // Once its delivery is done, the held event goes with the next sweep.
    held.reply = () => 200;
    // The recovered delivery's outcome recorded too, so only the held one is moved.
    await settled(1);
    // Due now: the dispatcher's idle poll picks it up.
    await bed.t.app.db.updateTable("webhook_deliveries").set({ next_attempt_at: new Date() }).where("state", "=", "pending").execute();
    await until(async () => (await pendingOrInFlight()).length === 0, 10_000, "held delivery done");
    expect(await retention.sweep(new Date(boundary.getTime() + 30 * DAY_MS))).toMatchObject({ events: 1, deliveries: 1 });
    const events = await bed.t.app.db.selectFrom("webhook_events").select("id").execute();
    expect(events.map((e) => e.id)).not.toContain(heldEvent);
    expect(events).toHaveLength(2);
  });

  it("deletes a webhook's deliveries and attempts with it", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    const { webhook: other } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    await api().publishEvent({ event: "request.completed", data: {} });
    await until(async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries.length === 1, 5_000, "attempt recorded");
    await until(async () => (await api().listDeliveries({ webhookId: other!.id })).deliveries.length === 1, 5_000, "attempt recorded");
    await api().deleteWebhook({ webhookId: webhook!.id });
    const rows = async (table: "webhook_deliveries" | "webhook_attempts", id: string) =>
      (await bed.t.app.db.selectFrom(table).select("id").where("webhook_id", "=", id).execute()).length;
    expect([await rows("webhook_deliveries", webhook!.id), await rows("webhook_attempts", webhook!.id)]).toEqual([0, 0]);
    expect([await rows("webhook_deliveries", other!.id), await rows("webhook_attempts", other!.id)]).toEqual([1, 1]);
  });
});

/** Some statement of this database is waiting for a row lock. */
async function someoneWaits(): Promise<boolean> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock'`.execute(bed.t.app.db);
  return rows[0]!.n > 0;
}

describe("retention and webhook deletes against concurrent writes", () => {
  const retention = () => new WebhookRetention(bed.t.app.db, createLogger("silent"), 30 * DAY_MS);
  /** Past the retention of everything published so far. */
  const later = () => new Date(Date.now() + 31 * DAY_MS);

  /** An event of the account published now, with deliveries to `webhookId` in the states given (never due by themselves). */
  async function eventWith(webhookId: string, states: DeliveryState[], id = uuidv7()) {
    await bed.t.app.db
      .insertInto("webhook_events")
      .values({ id, account_id: bed.user.accountId, name: "request.completed", body: "{}", occurred_at: new Date() })
      .execute();
    const deliveries = await bed.t.app.db
      .insertInto("webhook_deliveries")
      .values(states.map((state) => ({ event_id: id, webhook_id: webhookId, state, attempts: 1, next_attempt_at: new Date("9999-01-01") })))
      .returning("id")
      .execute();
    return { eventId: id, deliveryIds: deliveries.map((d) => d.id) };
  }
  const exists = async (table: "webhook_events" | "webhook_deliveries", id: string) =>
    (await bed.t.app.db.selectFrom(table).select("id").where("id", "=", id).execute()).length === 1;

  async function webhook() {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    return webhook!.id;
  }

  it("keeps a delivery recovered while the sweep waits for it, and its event", async () => {
    const webhookId = await webhook();
    const { eventId, deliveryIds } = await eventWith(webhookId, ["failed"]);
    const recovering = await heldOpen(bed.t.app.db, (tx) => repo.requeueFailedDeliveries(tx, webhookId, new Date(Date.now() - 3_600_000)));
    expect(recovering.result).toBe(1);
    const sweeping = retention().sweep(later());
    await until(someoneWaits, 5_000, "the sweep waiting for the recovered delivery");
    await recovering.commit();
    await sweeping;
    expect([await exists("webhook_events", eventId), await exists("webhook_deliveries", deliveryIds[0]!)]).toEqual([true, true]);
  });

  it("deletes an event whose delivery's outcome is recorded while the sweep waits for it, with all its attempts", async () => {
    const webhookId = await webhook();
    const { eventId, deliveryIds } = await eventWith(webhookId, ["pending"]);
    const deliveryId = deliveryIds[0]!;
    await bed.t.app.db.insertInto("webhook_attempts").values({ delivery_id: deliveryId, webhook_id: webhookId, attempt: 1, status: 500, success: false, latency_ms: 1 }).execute();
    const delivered: repo.AttemptOutcome = {
      deliveryId, webhookId, attempt: 2, status: 200, success: true, latencyMs: 1, error: "", responseBody: "",
      retryAt: undefined, state: "delivered", final: true, gone: false,
    };
    const recording = await heldOpen(bed.t.app.db, (tx) => repo.recordAttempts(tx, [delivered], 10));
    const sweeping = retention().sweep(later());
    await until(someoneWaits, 5_000, "the sweep waiting for the delivery being recorded");
    await recording.commit();
    await sweeping;
    expect([await exists("webhook_events", eventId), await exists("webhook_deliveries", deliveryId)]).toEqual([false, false]);
    expect(await orphanAttempts()).toBe(0);
  });

  it("keeps a delivery resent while the sweep runs, and its event", async () => {
    const webhookId = await webhook();
    const { eventId, deliveryIds } = await eventWith(webhookId, ["failed"]);
    const resending = await heldOpen(bed.t.app.db, (tx) => repo.resendDelivery(tx, webhookId, deliveryIds[0]!));
    let swept = false;
    const sweeping = retention()
      .sweep(later())
      .finally(() => (swept = true));
    await until(async () => swept || (await someoneWaits()), 5_000, "the sweep done or waiting");
    await resending.commit();
    await sweeping;
    expect([await exists("webhook_events", eventId), await exists("webhook_deliveries", resending.result!.deliveryId)]).toEqual([true, true]);
  });

  it("publishes past a webhook deleted while the publish waits for it: the event reaches the others", async () => {
    const gone = await webhook();
    const kept = await receiver();
    await api().createWebhook({ url: kept.url, events: ["request.completed"] });
    const deleting = await heldOpen(bed.t.app.db, (tx) => repo.deleteWebhook(tx, bed.user.accountId, gone));
    expect(deleting.result).toBe(true);
    const publishing = api().publishEvent({ event: "request.completed", data: { n: 1 } });
    await until(someoneWaits, 5_000, "the publish waiting for the webhook being deleted");
    await deleting.commit();
    const { eventId } = await publishing;
    await kept.waitFor(1);
    expect(kept.received[0]!.body.data).toEqual({ n: 1 });
    const deliveries = await bed.t.app.db.selectFrom("webhook_deliveries").select("webhook_id").where("event_id", "=", eventId).execute();
    expect(deliveries.map((d) => d.webhook_id)).not.toContain(gone);
  });

  it("answers a resend of a delivery whose event the sweep deleted meanwhile with NOT_FOUND naming delivery_id", async () => {
    const webhookId = await webhook();
    const { eventId, deliveryIds } = await eventWith(webhookId, ["failed"]);
    // This event alone (the newest id): whether earlier tests' events can go too depends on how far
    // their deliveries have got, which a busy machine moves.
    const before = await bed.t.app.db.selectFrom("webhook_events").select(["id"]).where("id", "<>", eventId).orderBy("id", "desc").executeTakeFirst();
    const after = before && { id: before.id, occurred_at: "-infinity" };
    const pruning = await heldOpen(bed.t.app.db, (tx) => repo.pruneEventsBefore(tx, "v7", later(), after, 10));
    expect(pruning.result).toMatchObject({ events: 1, deliveries: 1 });
    const resend = failure(api().resendDelivery({ webhookId, deliveryId: deliveryIds[0]! }));
    await until(someoneWaits, 5_000, "the resend waiting for the event");
    await pruning.commit();
    const error = await resend;
    expect([error.code, error.fieldViolations[0]?.field]).toEqual([Code.NOT_FOUND, "delivery_id"]);
  });

  it("keeps a failed delivery while another delivery of its event is pending, and both go once it is done", async () => {
    const webhookId = await webhook();
    const { eventId, deliveryIds } = await eventWith(webhookId, ["pending", "failed"]);
    const kept = async () => Promise.all([eventId, ...deliveryIds].map((id, i) => exists(i === 0 ? "webhook_events" : "webhook_deliveries", id)));
    await retention().sweep(later());
    expect(await kept()).toEqual([true, true, true]);
    await bed.t.app.db.updateTable("webhook_deliveries").set({ state: "delivered" }).where("id", "=", deliveryIds[0]!).execute();
    await retention().sweep(later());
    expect(await kept()).toEqual([false, false, false]);
  });

  it("deletes a webhook with the attempts of an outcome recorded while the delete waited", async () => {
    const webhookId = await webhook();
    const { deliveryIds } = await eventWith(webhookId, ["pending"]);
    const outcome: repo.AttemptOutcome = {
      deliveryId: deliveryIds[0]!,
      webhookId,
      attempt: 1,
      status: 200,
      success: true,
      latencyMs: 1,
      error: "",
      responseBody: "",
      retryAt: undefined,
      state: "delivered",
      final: true,
      gone: false,
    };
    // Recording holds the webhook's row until it commits.
    const recording = await heldOpen(bed.t.app.db, (tx) => repo.recordAttempts(tx, [outcome], 10));
    const deleting = api().deleteWebhook({ webhookId });
    await until(someoneWaits, 5_000, "the delete waiting for the webhook");
    await recording.commit();
    await deleting;
    const attempts = await bed.t.app.db.selectFrom("webhook_attempts").select("id").where("webhook_id", "=", webhookId).execute();
    expect(attempts).toHaveLength(0);
  });

  it("deletes a webhook while an outcome of its is being recorded, without a deadlock", async () => {
    const webhookId = await webhook();
    const { deliveryIds } = await eventWith(webhookId, ["pending"]);
    // Recording an outcome updates the delivery, then its webhook.
    let recorded!: () => void;
    const webhookNext = new Promise<void>((resolve) => (recorded = resolve));
    const recording = await heldOpen(bed.t.app.db, async (tx) => {
      await tx.updateTable("webhook_deliveries").set({ state: "delivered" }).where("id", "=", deliveryIds[0]!).execute();
      return async () => {
        await tx.updateTable("webhooks").set({ last_status: 200 }).where("id", "=", webhookId).execute();
        recorded();
      };
    });
    const deleting = api().deleteWebhook({ webhookId });
    await until(someoneWaits, 5_000, "the delete waiting for the delivery");
    await recording.result();
    await webhookNext;
    await recording.commit();
    await deleting;
    expect(await exists("webhook_deliveries", deliveryIds[0]!)).toBe(false);
  });

  /**
   * Two deliveries of the webhook, each of its own event, stored (and timestamped) in the reverse of
   * their ids' order, with their events' ids in that reverse order too: no scan meets them in id order.
   */
  async function reversedDeliveries(webhookId: string, tag: string) {
    const low = `00000000-0000-4000-8000-0000000000${tag}`;
    const high = `ffffffff-0000-4000-8000-0000000000${tag}`;
    // Above every version 7 floor of these years, so one retention step takes both events.
    const lowEvent = `10000000-0000-4000-8000-0000000000${tag}`;
    for (const [delivery, event] of [
      [high, lowEvent],
      [low, high],
    ] as const) {
      await bed.t.app.db
        .insertInto("webhook_events")
        .values({ id: event, account_id: bed.user.accountId, name: "request.completed", body: "{}", occurred_at: new Date() })
        .execute();
      await bed.t.app.db
        .insertInto("webhook_deliveries")
        .values({ id: delivery, event_id: event, webhook_id: webhookId, state: "delivered", attempts: 1, next_attempt_at: new Date("9999-01-01") })
        .execute();
    }
    return { low, high };
  }

  /** Of `ids`, those another transaction could lock now. */
  async function lockable(ids: string[]) {
    const rows = await bed.t.app.db
      .transaction()
      .execute((tx) => tx.selectFrom("webhook_deliveries").select("id").where("id", "in", ids).forUpdate().skipLocked().execute());
    return rows.map((r) => r.id);
  }

  /**
   * Starts `work` while the lower of two reversed deliveries is locked, and checks that it waits
   * there holding the higher one free: it locks in id order. Two statements that both do cannot
   * deadlock, as a webhook's delete and a retention step did when each took the other's order.
   */
  async function locksInIdOrder(webhookId: string, tag: string, work: (deliveries: { low: string; high: string }) => Promise<unknown>) {
    const deliveries = await reversedDeliveries(webhookId, tag);
    const { low, high } = deliveries;
    const holder = await heldOpen(bed.t.app.db, (tx) => tx.selectFrom("webhook_deliveries").select("id").where("id", "=", low).forUpdate().execute());
    const working = work(deliveries);
    await until(someoneWaits, 5_000, "the statement waiting for the lower delivery");
    expect(await lockable([high])).toEqual([high]);
    await holder.commit();
    await working;
    const left = await bed.t.app.db.selectFrom("webhook_deliveries").select("state").where("id", "in", [low, high]).execute();
    return left.map((d) => d.state);
  }

  it("locks a webhook's deliveries in id order to record outcomes, to sweep and to delete the webhook, so none of them deadlock", async () => {
    const webhookId = await webhook();
    const outcome = (deliveryId: string): repo.AttemptOutcome => ({
      deliveryId,
      webhookId,
      attempt: 2,
      status: 500,
      success: false,
      latencyMs: 1,
      error: "",
      responseBody: "",
      retryAt: undefined,
      state: "failed",
      final: true,
      gone: false,
    });
    // Finished in the reverse of id order.
    const recorded = await locksInIdOrder(webhookId, "50", ({ low, high }) => repo.recordAttempts(bed.t.app.db, [outcome(high), outcome(low)], 10));
    expect(recorded).toEqual(["failed", "failed"]);
    expect(await locksInIdOrder(webhookId, "51", () => retention().sweep(later()))).toEqual([]);
    expect(await locksInIdOrder(webhookId, "52", () => api().deleteWebhook({ webhookId }))).toEqual([]);
  });

  it("deletes events stored before ids were version 7 once they are old, wherever their random ids sort", async () => {
    const webhookId = await webhook();
    const v4 = (n: number, first: string) => `${first}0000000-0000-4000-8000-00000000000${n}`;
    const [low, high, young] = [v4(1, "0"), v4(2, "f"), v4(3, "0")];
    await eventWith(webhookId, ["delivered"], low);
    await eventWith(webhookId, ["failed"], high);
    await eventWith(webhookId, ["delivered"], young);
    // Published later than the sweep's cutoff, though its id sorts below every version 7 floor.
    await bed.t.app.db.updateTable("webhook_events").set({ occurred_at: new Date(Date.now() + 60 * DAY_MS) }).where("id", "=", young).execute();
    // One event per step, so the pass over the older ids goes on from its cursor.
    await new WebhookRetention(bed.t.app.db, createLogger("silent"), 30 * DAY_MS, 1).sweep(later());
    expect([await exists("webhook_events", low), await exists("webhook_events", high), await exists("webhook_events", young)]).toEqual([
      false,
      false,
      true,
    ]);
  });

  it("deletes a test delivery whose caller died, which no one will ever finish", async () => {
    const webhookId = await webhook();
    const deliveryId = await repo.insertTestDelivery(bed.t.app.db, {
      accountId: bed.user.accountId,
      webhookId,
      body: "{}",
      occurredAt: new Date(),
    });
    await retention().sweep(later());
    expect(await exists("webhook_deliveries", deliveryId)).toBe(false);
  });
});
