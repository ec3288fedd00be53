import { describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { createAccountWithKey } from "./support/accounts.js";
import { failure, until } from "./support/expect.js";
import { useWebhookApp } from "./support/webhook-app.js";

const bed = useWebhookApp();
const { api, receiver } = bed;

async function deliveriesOf(webhookId: string) {
  return bed.t.app.db.selectFrom("webhook_deliveries").selectAll().where("webhook_id", "=", webhookId).orderBy("created_at").execute();
}

async function settled(webhookId: string, count: number) {
  await until(
    async () => {
      const rows = await deliveriesOf(webhookId);
      return rows.length === count && rows.every((d) => d.state !== "pending");
    },
    10_000,
    `${count} deliveries settled`,
  );
  return deliveriesOf(webhookId);
}

describe("resend", () => {
  it("sends the same event again as a new delivery with a new X-Webhook-Id, over gRPC and HTTP", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url });
    const { eventId } = await api().publishEvent({ event: "request.completed", data: { trace_id: "t-r" } });
    const [original] = await r.waitFor(1);
    await until(async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries.length === 1);
    const [delivery] = (await api().listDeliveries({ webhookId: webhook!.id })).deliveries;

    const resent = await api().resendDelivery({ webhookId: webhook!.id, deliveryId: delivery!.deliveryId });
    expect(resent.eventId).toBe(eventId);
    expect(resent.deliveryId).not.toBe(delivery!.deliveryId);
    const [, again] = await r.waitFor(2);
    expect(again!.rawBody).toBe(original!.rawBody);
    expect(again!.headers["x-webhook-id"]).toBe(resent.deliveryId);

    const http = await bed.t.http("POST", `/api/webhooks/${webhook!.id}/deliveries/${delivery!.deliveryId}/resend`, { token: bed.user.key, body: {} });
    expect(http.status).toBe(200);
    expect(http.body).toEqual({ delivery_id: expect.any(String), event_id: eventId });
    const [, , third] = await r.waitFor(3);
    expect(third!.headers["x-webhook-id"]).toBe(http.body.delivery_id);
    await until(async () => (await api().listDeliveries({ webhookId: webhook!.id })).deliveries.length === 3);
  });

  it("refuses another account's delivery or webhook, a malformed id and a disabled webhook, naming what is wrong", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.failed"] });
    const stranger = await createAccountWithKey(bed.t, ["webhooks", "events:publish"]);
    const theirs = bed.t.client(stranger.key).webhooks;
    const { webhook: theirWebhook } = await theirs.createWebhook({ url: r.url, events: ["request.failed"] });
    await theirs.publishEvent({ event: "request.failed", data: {} });
    await r.waitFor(1);
    await until(async () => (await theirs.listDeliveries({ webhookId: theirWebhook!.id })).deliveries.length === 1);
    const [theirDelivery] = (await theirs.listDeliveries({ webhookId: theirWebhook!.id })).deliveries;

    const foreign = await failure(api().resendDelivery({ webhookId: webhook!.id, deliveryId: theirDelivery!.deliveryId }));
    expect(foreign.code).toBe(Code.NOT_FOUND);
    expect(foreign.reason).toBe("DELIVERY_NOT_FOUND");
    expect(foreign.fieldViolations.map((v) => v.field)).toEqual(["delivery_id"]);
    const foreignWebhook = await failure(api().resendDelivery({ webhookId: theirWebhook!.id, deliveryId: theirDelivery!.deliveryId }));
    expect(foreignWebhook.code).toBe(Code.NOT_FOUND);
    expect(foreignWebhook.reason).toBe("WEBHOOK_NOT_FOUND");
    expect((await failure(api().resendDelivery({ webhookId: webhook!.id, deliveryId: "nope" }))).fieldViolations[0]!.field).toBe("delivery_id");
    const empty = await failure(api().resendDelivery({ webhookId: webhook!.id, deliveryId: "" }));
    expect(empty.code).toBe(Code.INVALID_ARGUMENT);
    expect(empty.fieldViolations[0]!.field).toBe("delivery_id");

    const http = await bed.t.http("POST", `/api/webhooks/${webhook!.id}/deliveries/${theirDelivery!.deliveryId}/resend`, { token: bed.user.key });
    expect(http.status).toBe(404);
    expect(http.body.details[0].field_violations[0].field).toBe("delivery_id");

    await theirs.updateWebhook({ webhookId: theirWebhook!.id, enabled: false });
    const disabled = await failure(theirs.resendDelivery({ webhookId: theirWebhook!.id, deliveryId: theirDelivery!.deliveryId }));
    expect(disabled.code).toBe(Code.FAILED_PRECONDITION);
    expect(disabled.reason).toBe("WEBHOOK_DISABLED");
    expect(r.received).toHaveLength(1);
  });
});

describe("recover", () => {
  it("queues again every delivery that failed or was skipped since the given time, and only those", async () => {
    const r = await receiver();
    const { webhook } = await api().createWebhook({ url: r.url, events: ["request.completed"] });
    const id = webhook!.id;
    // Before `since`: failed too, but out of range.
    r.reply = () => 404;
    await api().publishEvent({ event: "request.completed", data: { n: "old" } });
    await settled(id, 1);
    await bed.t.app.db.updateTable("webhook_deliveries").set({ created_at: new Date(Date.now() - 3_600_000) }).where("webhook_id", "=", id).execute();
    const since = new Date(Date.now() - 60_000);

    // Since: one success, two that used up their retries (5xx), one final 404.
    const outcomes: Record<string, number> = { ok: 200, down1: 500, down2: 500, gone: 404 };
    r.reply = (got) => outcomes[(got.body.data as { n: string }).n] ?? 200;
    for (const n of Object.keys(outcomes)) await api().publishEvent({ event: "request.completed", data: { n } });
    await settled(id, 5);
    // And one skipped: held back by a Retry-After, then the webhook was disabled before its turn.
    r.reply = () => ({ status: 503, headers: { "retry-after": "3600" } });
    await api().publishEvent({ event: "request.completed", data: { n: "skipped" } });
    // Recorded, not only sent: a publish hands its delivery over already at attempt 1, and an outcome
    // recorded after the due time below is set would push that back by the hour again.
    await until(
      async () => (await deliveriesOf(id)).some((d) => d.attempts === 1 && d.state === "pending" && d.locked_until === null),
      5_000,
      "held back",
    );
    await api().updateWebhook({ webhookId: id, enabled: false });
    await bed.t.app.db.updateTable("webhook_deliveries").set({ next_attempt_at: new Date() }).where("state", "=", "pending").where("webhook_id", "=", id).execute();
    await until(async () => (await deliveriesOf(id)).some((d) => d.state === "skipped"), 5_000, "skipped");

    const disabled = await failure(api().recoverDeliveries({ webhookId: id, since }));
    expect(disabled.code).toBe(Code.FAILED_PRECONDITION);
    await api().updateWebhook({ webhookId: id, enabled: true });
    const before = r.received.length;
    r.reply = () => 200;
    const http = await bed.t.http("POST", `/api/webhooks/${id}/recover`, { token: bed.user.key, body: { since: since.toISOString() } });
    expect(http.status).toBe(200);
    expect(http.body).toEqual({ requeued: 4 });
    const again = (await r.waitFor(before + 4)).slice(before);
    expect(again.map((g) => (g.body.data as { n: string }).n).sort()).toEqual(["down1", "down2", "gone", "skipped"]);
    const rows = await settled(id, 6);
    expect(rows.every((d) => d.state === "delivered")).toBe(true);
    // The one from before `since` was left alone: sent once, never again.
    expect(r.received.filter((g) => (g.body.data as { n: string }).n === "old")).toHaveLength(1);
    // Recovered deliveries keep their X-Webhook-Id: a receiver that saw an earlier attempt can tell.
    const ids = new Set(rows.map((d) => d.id));
    for (const g of again) expect(ids.has(String(g.headers["x-webhook-id"]))).toBe(true);

    // Nothing failed any more: a second recover finds nothing.
    expect(await api().recoverDeliveries({ webhookId: id, since })).toEqual({ requeued: 0 });
  });

  it.each<[string, { since?: string }, string, string]>([
    ["no since", {}, "since", "is required"],
    ["a since in the future", { since: new Date(Date.now() + 3_600_000).toISOString() }, "since", "future"],
    ["a since that is not a time", { since: "yesterday" }, "since", "RFC 3339"],
  ])("refuses %s naming the field, over both transports", async (_label, body, field, words) => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/r" });
    const http = await bed.t.http("POST", `/api/webhooks/${webhook!.id}/recover`, { token: bed.user.key, body });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations[0].field).toBe(field);
    expect(http.body.message).toContain(words);
    if (typeof body.since !== "string" || !Number.isNaN(Date.parse(body.since))) {
      const since = body.since ? new Date(body.since) : undefined;
      const grpc = await failure(api().recoverDeliveries({ webhookId: webhook!.id, since }));
      expect(grpc.code).toBe(Code.INVALID_ARGUMENT);
      expect(grpc.fieldViolations[0]!.field).toBe(field);
    }
  });

  it("answers NOT_FOUND for another account's webhook", async () => {
    const stranger = await createAccountWithKey(bed.t, ["webhooks"]);
    const { webhook } = await bed.t.client(stranger.key).webhooks.createWebhook({ url: "http://127.0.0.1:9/x" });
    const error = await failure(api().recoverDeliveries({ webhookId: webhook!.id, since: new Date(0) }));
    expect(error.code).toBe(Code.NOT_FOUND);
  });
});
