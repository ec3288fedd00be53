import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "../src/client/index.js";
import { EVENT_CATALOG } from "../src/webhooks/events.js";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import {
  discordProblems,
  discordReply,
  magicHourProblems,
  slackProblems,
  slackReply,
  telegramProblems,
  telegramReply,
} from "./support/chat-services.js";
import { createTestDatabase } from "./support/database.js";
import { failure } from "./support/expect.js";
import { Receiver, type Received } from "./support/receiver.js";

let t: TestApp;
let user: { accountId: string; key: string };
const receivers: Receiver[] = [];

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase(), { WEBHOOK_RETRY_BASE_MS: "100", WEBHOOK_TIMEOUT_MS: "2000" });
  user = await createAccountWithKey(t, ["webhooks", "events:publish"]);
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.stop()));
  await t?.stop();
});

const api = () => t.client(user.key).webhooks;

/** A receiver that answers as the real service would; it remembers what it refused and why. */
async function service(check: (r: Received) => string[], reply: (problems: string[]) => ReturnType<Receiver["reply"]>) {
  const receiver = await Receiver.start(() => "");
  const refused: { event: string; problems: string[] }[] = [];
  receiver.reply = (r) => {
    const problems = check(r);
    if (problems.length > 0) refused.push({ event: String(r.headers["x-webhook-event"]), problems });
    return reply(problems);
  };
  receivers.push(receiver);
  return { receiver, refused };
}

/** Data for every catalog event, as their emitters send it, plus one event built to hit every limit. */
const LONG = "x".repeat(10_000);
const SAMPLES: Record<string, Record<string, unknown>> = {
  "request.completed": { trace_id: "t-1", api_key_id: "k-1", provider: "openai", model: "gpt-4o", status: 200, tokens_in: 12, tokens_out: 30, cost_usd: 0.0042 },
  "request.failed": { trace_id: "t-2", provider: "anthropic", model: "claude", status: 502, error: "upstream <timeout> & retry <!channel> @everyone" },
  "quota.exceeded": { quota: "credits", required: 450, balance: 100, shortfall: 350 },
  "test.ping": { message: "This is a test delivery from the webhook dashboard.", webhookId: "w-1" },
  "video.started": { id: "j-1", type: "FACE_SWAP", name: "Holiday clip", status: "rendering", credits_charged: 450, frames_rendered: 0, error: null },
  "video.completed": { id: "j-1", type: "FACE_SWAP", name: "Holiday clip", status: "complete", credits_charged: 300, frames_rendered: 300, error: null },
  "video.errored": { id: "j-2", type: "FACE_SWAP", name: "", status: "error", credits_charged: 0, frames_rendered: 12, error: { code: "unknown_error", message: "no face found" } },
  "webhook.disabled": { webhook_id: "w-9", description: "billing <alerts> @here", host: "hooks.example.com", reason: "failures", failure_count: 10, last_status: 503, disabled_at: "2026-11-23T11:00:00.000Z" },
  "billing.blank_fields": { "": "a value under no name", blank: "   " },
  "billing.huge_event": Object.fromEntries([["summary", LONG], ...Array.from({ length: 40 }, (_, i) => [`field_${i}`, `${"v".repeat(1500)}😀`])]),
};

describe("kinds", () => {
  it("renders every catalog event (and an oversized one) in the shape each real service accepts", async () => {
    expect(Object.keys(SAMPLES)).toEqual(expect.arrayContaining(EVENT_CATALOG.map((e) => e.name)));
    const slack = await service((r) => slackProblems(r.body), slackReply);
    const discord = await service((r) => discordProblems(r.body), discordReply);
    const telegram = await service((r) => telegramProblems(r.body), telegramReply);
    let magicSecret = "";
    const magic = await service((r) => magicHourProblems(magicSecret, r), (p) => (p.length === 0 ? 200 : 401));
    const custom = await service(() => [], () => 200);

    await api().createWebhook({ url: slack.receiver.url, kind: "slack" });
    await api().createWebhook({ url: discord.receiver.url, kind: "discord" });
    const tg = await api().createWebhook({ url: `${telegram.receiver.url}/bot123:abc/sendMessage`, kind: "telegram", settings: { chat_id: "-1001234567890" } });
    expect(tg.webhook).toMatchObject({ kind: "telegram", settings: { chat_id: "-1001234567890" } });
    magicSecret = (await api().createWebhook({ url: magic.receiver.url, kind: "magic-hour" })).webhook!.secret;
    // Over HTTP, the settings map as a JSON object.
    const template = JSON.stringify({ msg: "{{event}} for {{ data.trace_id }}", tokens: "{{data.tokens_in}}", all: "{{data}}", at: "{{timestamp}}", id: "{{delivery_id}}" });
    const created = await t.http("POST", "/api/webhooks", { token: user.key, body: { url: custom.receiver.url, kind: "custom", settings: { template } } });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ kind: "custom", settings: { template } });

    for (const [event, data] of Object.entries(SAMPLES)) await api().publishEvent({ event, data });
    const count = Object.keys(SAMPLES).length;
    await Promise.all([slack, discord, telegram, magic, custom].map((s) => s.receiver.waitFor(count)));
    for (const s of [slack, discord, telegram, magic]) expect(s.refused).toEqual([]);

    // Readable: each message says what happened in words, not only as JSON.
    const byEvent = (s: { receiver: Receiver }, event: string) => s.receiver.received.find((r) => r.headers["x-webhook-event"] === event)!;
    const slackDone = byEvent(slack, "request.completed").body as never as { text: string; blocks: { type: string }[] };
    expect(slackDone.text).toBe("request.completed: a proxied request completed successfully: openai/gpt-4o answered 200: 12 tokens in, 30 out, $0.0042");
    expect(slackDone.blocks.map((b) => b.type)).toEqual(["header", "section", "section", "context"]);
    const slackFailed = JSON.stringify(byEvent(slack, "request.failed").body);
    expect(slackFailed).toContain("upstream &lt;timeout&gt; &amp; retry &lt;!channel&gt;");
    const embed = (byEvent(discord, "video.errored").body as never as { embeds: { description: string }[]; allowed_mentions: unknown });
    expect(embed.embeds[0]!.description).toBe("Face swap j-2 failed: no face found; its credits were refunded");
    expect(embed.allowed_mentions).toEqual({ parse: [] });
    const disabledEmbed = byEvent(discord, "webhook.disabled").body as never as { embeds: { description: string }[] };
    expect(disabledEmbed.embeds[0]!.description).toBe(
      'Webhook "billing <alerts> @here" to hooks.example.com was disabled: 10 failed deliveries in a row (last status 503); enable it again once the receiver is fixed',
    );
    const tgMessage = byEvent(telegram, "video.completed");
    expect(tgMessage.path).toBe("/hook/bot123:abc/sendMessage");
    expect(tgMessage.body).toMatchObject({ chat_id: -1001234567890 });
    expect((tgMessage.body as never as { text: string }).text).toContain('Face swap "Holiday clip" completed: 300 frames, 300 credits');
    const hugeTg = (byEvent(telegram, "billing.huge_event").body as never as { text: string }).text;
    expect(hugeTg.length).toBe(4096);
    expect(hugeTg.endsWith("…")).toBe(true);
    expect(byEvent(magic, "video.completed").body).toEqual({ type: "video.completed", payload: SAMPLES["video.completed"] });
    const rendered = byEvent(custom, "request.completed");
    expect(rendered.body).toEqual({
      msg: "request.completed for t-1",
      tokens: 12,
      all: SAMPLES["request.completed"],
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      id: rendered.headers["x-webhook-id"],
    });
    // Every kind carries the X-Webhook-* headers, signed over the bytes it sent.
    for (const s of [slack, discord, telegram, magic, custom]) {
      for (const r of s.receiver.received) expect(r.headers["x-webhook-signature"]).toMatch(/^sha256=[0-9a-f]{64}$/);
    }
  });

  it("sends the test delivery in the webhook's kind", async () => {
    const slack = await service((r) => slackProblems(r.body), slackReply);
    const { webhook } = await api().createWebhook({ url: slack.receiver.url, kind: "slack" });
    expect(await api().testWebhook({ webhookId: webhook!.id })).toEqual({ delivered: true, status: 200, error: "" });
    expect((slack.receiver.received[0]!.body as never as { text: string }).text).toContain("This is a test delivery");
  });

  it("changes kind on update; settings follow the kind", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/k" });
    expect(webhook).toMatchObject({ kind: "generic", settings: {} });
    const toTelegram = await api().updateWebhook({ webhookId: webhook!.id, kind: "telegram", settings: { chat_id: "@ops_alerts" } });
    expect(toTelegram.webhook).toMatchObject({ kind: "telegram", settings: { chat_id: "@ops_alerts" } });
    const description = await api().updateWebhook({ webhookId: webhook!.id, description: "kept" });
    expect(description.webhook).toMatchObject({ kind: "telegram", settings: { chat_id: "@ops_alerts" } });
    const back = await t.http("PUT", `/api/webhooks/${webhook!.id}`, { token: user.key, body: { kind: "generic" } });
    expect(back.body).toMatchObject({ kind: "generic", settings: {} });
  });

  it.each([
    ["an unknown kind", { kind: "teams" }, "kind"],
    ["telegram without chat_id", { kind: "telegram" }, "settings.chat_id"],
    ["telegram with a bad chat_id", { kind: "telegram", settings: { chat_id: "my chat" } }, "settings.chat_id"],
    ["a setting the kind does not take", { kind: "slack", settings: { channel: "#ops" } }, "settings.channel"],
    ["custom without a template", { kind: "custom" }, "settings.template"],
    ["a template that is not JSON", { kind: "custom", settings: { template: '{"msg": "{{event}}"' } }, "settings.template"],
    ["a template with unbalanced braces", { kind: "custom", settings: { template: '{"msg": "{{event"}' } }, "settings.template"],
    ["a template with an unknown path", { kind: "custom", settings: { template: '{"msg": "{{process.env}}"}' } }, "settings.template"],
    ["a template nested past 32 levels", { kind: "custom", settings: { template: `${"[".repeat(3000)}"{{event}}"${"]".repeat(3000)}` } }, "settings.template"],
    ["telegram with a chat_id past 52 bits", { kind: "telegram", settings: { chat_id: "9007199254740993" } }, "settings.chat_id"],
    ["telegram with chat_id 0", { kind: "telegram", settings: { chat_id: "-0" } }, "settings.chat_id"],
  ])("refuses %s naming the field, over both transports", async (_label, fields, field) => {
    const grpc = await failure(api().createWebhook({ url: "http://127.0.0.1:9/bad", ...fields }));
    expect(grpc.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpc.fieldViolations.map((v) => v.field)).toContain(field);
    const http = await t.http("POST", "/api/webhooks", { token: user.key, body: { url: "http://127.0.0.1:9/bad", ...fields } });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations.map((v: { field: string }) => v.field)).toContain(field);
    expect(http.body.message).toContain(field);
  });

  it.each<[string, { kind: string; settings?: Record<string, string>; signatureScheme?: string; secret?: string }, string[]]>([
    ["a bad kind", { kind: "teams" }, ["description", "kind"]],
    [
      "bad settings and a secret the new scheme refuses",
      { kind: "slack", settings: { channel: "#ops" }, signatureScheme: "standard-webhooks", secret: "s".repeat(20) },
      ["description", "settings.channel", "secret"],
    ],
  ])("names every bad field of an update in one error: a long description and %s", async (_label, fields, expected) => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/all-at-once" });
    const description = "d".repeat(1_001);
    const grpc = await failure(api().updateWebhook({ webhookId: webhook!.id, description, ...fields }));
    expect(grpc.code).toBe(Code.INVALID_ARGUMENT);
    expect(grpc.fieldViolations.map((v) => v.field)).toEqual(expected);
    const { signatureScheme, ...rest } = fields;
    const body = { description, ...rest, signature_scheme: signatureScheme };
    const http = await t.http("PUT", `/api/webhooks/${webhook!.id}`, { token: user.key, body });
    expect(http.status).toBe(400);
    expect(http.body.details[0].field_violations.map((v: { field: string }) => v.field)).toEqual(expected);
  });

  it("refuses an update to custom without a template", async () => {
    const { webhook } = await api().createWebhook({ url: "http://127.0.0.1:9/u" });
    const error = await failure(api().updateWebhook({ webhookId: webhook!.id, kind: "custom" }));
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["settings.template"]);
  });
});
