import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { createLogger } from "../src/platform/logger.js";
import { WebhookRetention } from "../src/webhooks/retention.js";
import { until } from "./support/expect.js";
import { useWebhookApp } from "./support/webhook-app.js";

const bed = useWebhookApp();
const { api, receiver } = bed;
const DAY_MS = 86_400_000;

async function count(table: "webhook_events" | "webhook_deliveries" | "webhook_attempts") {
  const row = await bed.t.app.db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
  return Number(row.n);
}

async function pendingOrInFlight() {
  const rows = await bed.t.app.db.selectFrom("webhook_deliveries").select(["state", "attempts"]).execute();
  return rows.filter((d) => d.state === "pending");
}

/** Everything published so far has had its outcome: delivered, failed, or pending with a retry due much later. */
async function settled(expectedPending: number) {
  await until(
    async () => {
      const pending = await pendingOrInFlight();
      const deliveries = await count("webhook_deliveries");
      const attempts = await count("webhook_attempts");
      return pending.length === expectedPending && pending.every((d) => d.attempts >= 1) && attempts >= deliveries;
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
