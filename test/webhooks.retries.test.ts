import { describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { nextAttemptAt, RETRY_AFTER_MAX_MS } from "../src/webhooks/retry-schedule.js";
import { failure, until } from "./support/expect.js";
import { useWebhookApp } from "./support/webhook-app.js";

const BASE_MS = 100;
const bed = useWebhookApp({ WEBHOOK_RETRY_BASE_MS: String(BASE_MS) });
const { api, receiver } = bed;

async function attemptsOf(webhookId: string) {
  return bed.t.app.db.selectFrom("webhook_attempts").selectAll().where("webhook_id", "=", webhookId).orderBy("created_at").execute();
}

describe("the extended schedule", () => {
  const SVIX_GAPS_S = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];

  it("retries for about a day with growing gaps, each within 20 % jitter of Svix's", () => {
    const now = new Date(0);
    const at = (attempt: number, random: number) => nextAttemptAt("extended", attempt, { status: 500 }, 1000, now, () => random)?.getTime();
    SVIX_GAPS_S.forEach((gap, i) => {
      expect(at(i + 1, 0)).toBe(gap * 800);
      expect(at(i + 1, 1)).toBe(gap * 1200);
      expect(at(i + 1, 0.5)).toBe(gap * 1000);
    });
    expect(at(8, 0.5)).toBeUndefined();
    // The default schedule, for comparison: 1 s, 2 s, 4 s, then over.
    expect([1, 2, 3, 4].map((n) => nextAttemptAt("seed", n, { status: 0 }, 1000, now)?.getTime())).toEqual([1000, 2000, 4000, undefined]);
  });

  it("Retry-After: seconds or an HTTP date, only on 429 and 503, capped at an hour", () => {
    const now = new Date(Date.UTC(2026, 10, 23, 12));
    const wait = (status: number, retryAfter?: string) => (nextAttemptAt("seed", 1, { status, retryAfter }, 1000, now)?.getTime() ?? NaN) - now.getTime();
    expect(wait(429, "30")).toBe(30_000);
    expect(wait(503, new Date(now.getTime() + 90_000).toUTCString())).toBe(90_000);
    expect(wait(429)).toBe(1000);
    expect(wait(503, "0")).toBe(1000);
    expect(wait(500, "30")).toBe(1000);
    expect(wait(503, "999999")).toBe(RETRY_AFTER_MAX_MS);
    expect(wait(503, "soon")).toBe(1000);
    expect(wait(404, "30")).toBeNaN();
  });

  it("keeps a delivery going past the default schedule's four attempts, at the recorded gaps", async () => {
    const r = await receiver();
    r.reply = () => 500;
    const { webhook } = await api().createWebhook({ url: r.url, retrySchedule: "extended" });
    expect(webhook).toMatchObject({ retrySchedule: "extended" });
    await api().publishEvent({ event: "request.completed", data: {} });
    // Each due time is recorded with its attempt; moving it to now stands in for the hours passing.
    for (let attempt = 1; attempt <= 8; attempt++) {
      await r.waitFor(attempt, 5_000);
      await until(async () => (await attemptsOf(webhook!.id)).length === attempt, 5_000, `attempt ${attempt} recorded`);
      const last = (await attemptsOf(webhook!.id))[attempt - 1]!;
      if (attempt === 8) {
        expect(last.next_attempt_at).toBeNull();
        break;
      }
      const gap = last.next_attempt_at!.getTime() - last.created_at.getTime();
      const expected = SVIX_GAPS_S[attempt - 1]! * BASE_MS;
      expect(gap).toBeGreaterThanOrEqual(expected * 0.8 - 50);
      expect(gap).toBeLessThanOrEqual(expected * 1.2 + 50);
      await bed.t.app.db.updateTable("webhook_deliveries").set({ next_attempt_at: new Date() }).where("webhook_id", "=", webhook!.id).execute();
    }
    const delivery = await bed.t.app.db.selectFrom("webhook_deliveries").selectAll().where("webhook_id", "=", webhook!.id).executeTakeFirstOrThrow();
    expect(delivery).toMatchObject({ state: "failed", attempts: 8 });
    expect(new Set(r.received.map((x) => x.headers["x-webhook-id"])).size).toBe(1);
  });
});

describe("for every schedule", () => {
  it.each(["seed", "extended"])("%s: a 429 with Retry-After is retried no sooner than it says", async (schedule) => {
    const r = await receiver();
    r.reply = () => (r.received.length === 1 ? { status: 429, headers: { "retry-after": "2" } } : 200);
    const { webhook } = await api().createWebhook({ url: r.url, retrySchedule: schedule });
    await api().publishEvent({ event: "request.completed", data: {} });
    const [first, second] = await r.waitFor(2, 10_000);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(2_000);
    await until(async () => (await attemptsOf(webhook!.id)).length === 2);
    const [limited, delivered] = await attemptsOf(webhook!.id);
    expect(limited).toMatchObject({ status: 429, success: false });
    expect(delivered).toMatchObject({ status: 200, success: true });
  });

  it.each([
    ["429", 429],
    ["503", 503],
    ["a network failure", 0],
  ])("%s until the retries run out ends failed and counts toward auto-disable", async (_label, status) => {
    const r = await receiver();
    r.reply = () => status;
    // Nothing listens on port 9 (discard): a refused connection, status 0.
    const { webhook } = await api().createWebhook({ url: status === 0 ? "http://127.0.0.1:9/closed" : r.url });
    // One failure short of the threshold: this delivery's failure must be the one that disables.
    await bed.t.app.db.updateTable("webhooks").set({ failure_count: 9 }).where("id", "=", webhook!.id).execute();
    await api().publishEvent({ event: "request.completed", data: {} });
    await until(async () => (await attemptsOf(webhook!.id)).length === 4, 10_000, "four attempts recorded");
    expect((await attemptsOf(webhook!.id)).map((a) => [a.status, a.success])).toEqual(Array(4).fill([status, false]));
    const delivery = await bed.t.app.db.selectFrom("webhook_deliveries").selectAll().where("webhook_id", "=", webhook!.id).executeTakeFirstOrThrow();
    expect(delivery).toMatchObject({ state: "failed", attempts: 4 });
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ enabled: false, failureCount: 10, lastStatus: status });
  });

  it("a final 4xx ends delivered with success false, and counts as a failure too", async () => {
    const r = await receiver();
    r.reply = () => 404;
    const { webhook } = await api().createWebhook({ url: r.url });
    await api().publishEvent({ event: "request.completed", data: {} });
    await until(async () => (await attemptsOf(webhook!.id)).length === 1);
    await until(async () => (await api().getWebhook({ webhookId: webhook!.id })).webhook!.failureCount === 1, 5_000, "failure counted");
    const delivery = await bed.t.app.db.selectFrom("webhook_deliveries").selectAll().where("webhook_id", "=", webhook!.id).executeTakeFirstOrThrow();
    expect(delivery).toMatchObject({ state: "delivered", attempts: 1 });
  });

  it("a 503 with an HTTP-date Retry-After waits until then", async () => {
    const r = await receiver();
    r.reply = () => (r.received.length === 1 ? { status: 503, headers: { "retry-after": new Date(Date.now() + 3_000).toUTCString() } } : 200);
    await api().createWebhook({ url: r.url });
    await api().publishEvent({ event: "request.completed", data: {} });
    const [first, second] = await r.waitFor(2, 10_000);
    // HTTP dates have whole seconds: at least two of the three seconds remain.
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(2_000);
  });

  it.each(["seed", "extended"])("%s: 410 Gone disables the webhook at once, without retrying", async (schedule) => {
    const r = await receiver();
    r.reply = () => 410;
    const { webhook } = await api().createWebhook({ url: r.url, retrySchedule: schedule });
    await api().publishEvent({ event: "request.completed", data: {} });
    await r.waitFor(1);
    await until(async () => !(await api().getWebhook({ webhookId: webhook!.id })).webhook!.enabled, 5_000, "the webhook disabled");
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook).toMatchObject({ enabled: false, status: "inactive", lastStatus: 410 });
    expect(bed.t.logs.some((l) => l.event === "webhook_disabled" && l.reason === "gone" && l.webhook_id === webhook!.id)).toBe(true);
    // Neither a retry nor a later event reaches it.
    await api().publishEvent({ event: "request.completed", data: {} });
    await new Promise((resolve) => setTimeout(resolve, 8 * BASE_MS));
    expect(r.received).toHaveLength(1);
  });

  it("a 410 to the test endpoint does not disable", async () => {
    const r = await receiver();
    r.reply = () => 410;
    const { webhook } = await api().createWebhook({ url: r.url });
    expect(await api().testWebhook({ webhookId: webhook!.id })).toMatchObject({ delivered: false, status: 410 });
    expect((await api().getWebhook({ webhookId: webhook!.id })).webhook!.enabled).toBe(true);
  });
});

describe("validation", () => {
  it("refuses an unknown retry_schedule naming the field, over both transports; updates a known one", async () => {
    const grpc = await failure(api().createWebhook({ url: "http://127.0.0.1:9/r", retrySchedule: "forever" }));
    expect(grpc.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpc.fieldViolations.map((v) => v.field)).toEqual(["retry_schedule"]);
    const created = await bed.t.http("POST", "/api/webhooks", { token: bed.user.key, body: { url: "http://127.0.0.1:9/r" } });
    expect(created.body.retry_schedule).toBe("seed");
    const bad = await bed.t.http("PUT", `/api/webhooks/${created.body.id}`, { token: bed.user.key, body: { retry_schedule: "daily" } });
    expect(bad.status).toBe(400);
    expect(bad.body.details[0].field_violations[0].field).toBe("retry_schedule");
    const good = await bed.t.http("PUT", `/api/webhooks/${created.body.id}`, { token: bed.user.key, body: { retry_schedule: "extended" } });
    expect(good.body.retry_schedule).toBe("extended");
  });
});
