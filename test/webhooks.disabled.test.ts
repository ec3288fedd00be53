import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { createAccountWithKey } from "./support/accounts.js";
import { until } from "./support/expect.js";
import { useWebhookApp } from "./support/webhook-app.js";

const bed = useWebhookApp();
const { api, receiver } = bed;

async function webhookOf(id: string) {
  return (await api().getWebhook({ webhookId: id })).webhook!;
}

describe("a webhook disabled automatically", () => {
  it("after 10 failures: tells the account's other webhooks that subscribe, records why and since when", async () => {
    const failing = await receiver();
    failing.reply = () => 404;
    const watching = await receiver();
    const bystanding = await receiver();
    const { webhook } = await api().createWebhook({ url: `${failing.url}/hook/secret-token`, events: ["request.failed"], description: "billing alerts" });
    const { webhook: watcher } = await api().createWebhook({ url: watching.url, events: ["webhook.disabled"], kind: "slack" });
    const { webhook: everything } = await api().createWebhook({ url: watching.url, events: ["*"] });
    await api().createWebhook({ url: bystanding.url, events: ["quota.exceeded"] });
    // Another account's webhook that subscribes hears nothing of this one.
    const stranger = await createAccountWithKey(bed.t, ["webhooks"]);
    const outsider = await receiver();
    await bed.t.client(stranger.key).webhooks.createWebhook({ url: outsider.url, events: ["webhook.disabled"] });

    const before = new Date();
    for (let i = 0; i < 10; i++) await api().publishEvent({ event: "request.failed", data: { i } });
    await until(async () => !(await webhookOf(webhook!.id)).enabled, 5_000, "the webhook disabled");
    const disabled = await webhookOf(webhook!.id);
    expect(disabled).toMatchObject({ enabled: false, status: "inactive", disabledReason: "failures", failureCount: 10, lastStatus: 404 });
    expect(disabled.disabledAt!.getTime()).toBeGreaterThanOrEqual(before.getTime() - 1_000);
    expect(bed.t.logs.some((l) => l.event === "webhook_disabled" && l.webhook_id === webhook!.id && l.reason === "failures")).toBe(true);

    // The watcher (slack) and the "*" webhook each get one notice; it is rendered by the kind.
    await until(() => watching.received.filter((r) => r.headers["x-webhook-event"] === "webhook.disabled").length === 2, 5_000, "two notices");
    const notices = watching.received.filter((r) => r.headers["x-webhook-event"] === "webhook.disabled");
    const generic = notices.find((r) => "data" in r.body)!;
    expect(generic.body).toEqual({
      event: "webhook.disabled",
      timestamp: disabled.disabledAt!.toISOString(),
      data: {
        webhook_id: webhook!.id,
        description: "billing alerts",
        // The host only: the path may hold a token.
        host: new URL(failing.url).host,
        reason: "failures",
        failure_count: 10,
        last_status: 404,
        disabled_at: disabled.disabledAt!.toISOString(),
      },
    });
    const slack = notices.find((r) => r !== generic)!.body as unknown as { text: string };
    expect(slack.text).toContain(`Webhook "billing alerts" to ${new URL(failing.url).host} was disabled: 10 failed deliveries in a row (last status 404)`);
    expect(JSON.stringify(notices.map((n) => n.body))).not.toContain("secret-token");
    expect((await webhookOf(watcher!.id)).enabled).toBe(true);
    expect((await webhookOf(everything!.id)).enabled).toBe(true);
    await sleep(300);
    expect(bystanding.received).toHaveLength(0);
    expect(outsider.received).toHaveLength(0);
    expect(failing.received).toHaveLength(10);

    // Enabling again clears the reason and the time; a manual disable records "manual" and tells nobody.
    expect(await api().updateWebhook({ webhookId: webhook!.id, enabled: true }).then((r) => r.webhook)).toMatchObject({
      enabled: true,
      failureCount: 0,
      disabledReason: "",
      disabledAt: undefined,
    });
    const manual = (await api().updateWebhook({ webhookId: webhook!.id, enabled: false })).webhook!;
    expect(manual).toMatchObject({ enabled: false, disabledReason: "manual" });
    expect(manual.disabledAt).toBeInstanceOf(Date);
    // Disabling what is already off keeps the first reason and time.
    expect((await api().updateWebhook({ webhookId: webhook!.id, enabled: false })).webhook).toMatchObject({
      disabledReason: "manual",
      disabledAt: manual.disabledAt,
    });
    await sleep(300);
    expect(watching.received.filter((r) => r.headers["x-webhook-event"] === "webhook.disabled")).toHaveLength(2);
  });

  it("on 410 Gone: reason gone, over HTTP too, and the notice says so", async () => {
    const gone = await receiver();
    gone.reply = () => 410;
    const watching = await receiver();
    const { webhook } = await api().createWebhook({ url: gone.url, events: ["video.completed"] });
    await api().createWebhook({ url: watching.url, events: ["webhook.disabled"] });
    await api().publishEvent({ event: "video.completed", data: {} });
    await watching.waitFor(1, 5_000);
    expect(watching.received[0]!.body.data).toMatchObject({ webhook_id: webhook!.id, reason: "gone", last_status: 410, failure_count: 1 });
    const shown = await bed.t.http("GET", `/api/webhooks/${webhook!.id}`, { token: bed.user.key });
    expect(shown.body).toMatchObject({ enabled: false, disabled_reason: "gone", disabled_at: watching.received[0]!.body.data.disabled_at });
    expect(gone.received).toHaveLength(1);
  });

  it("a test delivery's failures never disable, so never notify", async () => {
    const failing = await receiver();
    failing.reply = () => 410;
    const watching = await receiver();
    const { webhook } = await api().createWebhook({ url: failing.url, events: ["request.completed"] });
    await api().createWebhook({ url: watching.url, events: ["webhook.disabled"] });
    expect(await api().testWebhook({ webhookId: webhook!.id })).toMatchObject({ delivered: false, status: 410 });
    await sleep(300);
    expect((await webhookOf(webhook!.id)).enabled).toBe(true);
    expect(watching.received).toHaveLength(0);
  });
});
