import fs from "node:fs/promises";
import path from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccountWithKey } from "./support/accounts.js";
import { startTestApp, type TestApp } from "./support/app.js";
import { createTestDatabase } from "./support/database.js";
import { Receiver } from "./support/receiver.js";

/** Debian's Chromium, which .ci/run installs. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const ARTIFACTS = path.resolve("test-artifacts");

let t: TestApp;
let browser: Browser;
let page: Page;
let receiver: Receiver;
let secret = "";
let key = "";
let accountId = "";

beforeAll(async () => {
  t = await startTestApp(await createTestDatabase());
  ({ key, accountId } = await createAccountWithKey(t, ["webhooks"]));
  receiver = await Receiver.start(() => secret);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = await browser.newPage();
  page.on("dialog", (dialog) => void dialog.accept());
});
afterAll(async () => {
  await browser?.close();
  await receiver?.stop();
  await t?.stop();
});

describe("/dashboard/webhooks in a real browser", () => {
  it("refuses a wrong key and a key without the webhooks scope", async () => {
    await page.goto(`${t.httpUrl}/dashboard/webhooks`);
    await expect.poll(() => page.isVisible("#login")).toBe(true);
    await page.fill("#token", "atr_not-a-real-key");
    await page.click("#login button[type=submit]");
    await expect.poll(() => page.textContent("#login-error")).toBe("This API key is not valid.");
    const other = await createAccountWithKey(t, ["namespaces"]);
    await page.fill("#token", other.key);
    await page.click("#login button[type=submit]");
    await expect.poll(() => page.textContent("#login-error")).toBe("This API key lacks the webhooks scope.");
  });

  it("logs in with a cookie that scripts cannot read", async () => {
    await page.fill("#token", key);
    await page.click("#login button[type=submit]");
    await expect.poll(() => page.isVisible("#app")).toBe(true);
    const [cookie] = await page.context().cookies();
    expect(cookie).toMatchObject({ name: "auth_token", httpOnly: true, sameSite: "Strict" });
    expect(await page.evaluate("document.cookie")).toBe("");
  });

  it("creates a webhook with the event picker and shows its secret once", async () => {
    await page.fill("#url", receiver.url);
    await page.fill("#description", "<img src=x onerror=alert(1)> alerts");
    await page.uncheck('#event-picker input[value="*"]');
    await page.check('#event-picker input[value="request.completed"]');
    await page.check('#event-picker input[value="test.ping"]');
    await page.fill("#custom-events", "billing.invoice_paid");
    await page.click("#save");
    await expect.poll(() => page.isVisible("#created-secret")).toBe(true);
    secret = (await page.textContent("#created-secret-value"))!;
    expect(secret).toMatch(/^whsec_[0-9a-f]{48}$/);

    const row = page.locator("#webhooks tr").first();
    await expect.poll(() => row.locator(".status").textContent()).toBe("active");
    expect(await row.locator(".url").textContent()).toBe(receiver.url);
    expect(await row.locator("td").nth(2).textContent()).toBe("request.completed, test.ping, billing.invoice_paid");
    // The description is text, not markup.
    expect(await row.locator(".muted").textContent()).toBe("<img src=x onerror=alert(1)> alerts");
    expect(await page.locator("#webhooks img").count()).toBe(0);
  });

  it("sends a test delivery, shows its result and the delivery history", async () => {
    await page.locator("#webhooks tr").first().locator("button.test").click();
    const row = page.locator("#webhooks tr").first();
    await expect.poll(() => row.locator(".test-result").textContent()).toBe("Test delivered (200)");
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]!.signatureValid).toBe(true);
    expect(receiver.received[0]!.body.event).toBe("test.ping");
    await expect.poll(() => page.isVisible("#deliveries-section")).toBe(true);
    const delivery = page.locator("#deliveries tr").first();
    expect(await delivery.locator("td").nth(1).textContent()).toBe("test.ping");
    expect(await delivery.locator("td").nth(3).textContent()).toBe("200");
    expect(await delivery.locator("td").nth(4).textContent()).toBe("success");
  });

  it("shows a failed test as errored", async () => {
    receiver.reply = () => 500;
    await page.locator("#webhooks tr").first().locator("button.test").click();
    const row = page.locator("#webhooks tr").first();
    await expect.poll(() => row.locator(".test-result").textContent()).toBe("Test failed: status 500");
    expect(await row.locator(".status").textContent()).toBe("errored");
    receiver.reply = () => 200;
  });

  it("disables and enables with the toggle, and edits", async () => {
    let row = page.locator("#webhooks tr").first();
    await row.locator("button.toggle").click();
    await expect.poll(() => page.locator("#webhooks tr").first().locator(".status").textContent()).toBe("inactive");
    row = page.locator("#webhooks tr").first();
    await row.locator("button.toggle").click();
    await expect.poll(() => page.locator("#webhooks tr").first().locator(".status").textContent()).not.toBe("inactive");

    await page.locator("#webhooks tr").first().locator("button.edit").click();
    expect(await page.inputValue("#url")).toBe(receiver.url);
    await page.fill("#description", "edited in the browser");
    await page.click("#save");
    await expect.poll(() => page.locator("#webhooks tr").first().locator(".muted").textContent()).toBe("edited in the browser");

    await fs.mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-webhooks.png"), fullPage: true });
  });

  it("chooses a payload format, refusing a template that does not parse", async () => {
    await page.locator("#webhooks tr").first().locator("button.edit").click();
    expect(await page.isVisible("#template")).toBe(false);
    await page.selectOption("#kind", "custom");
    await page.fill("#template", '{"msg": "{{event}}"');
    await page.click("#save");
    await expect.poll(() => page.textContent("#form-error")).toContain("settings.template: is not valid JSON");
    await page.fill("#template", '{"msg": "{{event}} for {{data.trace_id}}"}');
    await page.click("#save");
    await expect.poll(() => page.locator("#webhooks tr").first().locator(".kind").first().textContent()).toBe("custom");
    await page.locator("#webhooks tr").first().locator("button.edit").click();
    expect(await page.inputValue("#template")).toBe('{"msg": "{{event}} for {{data.trace_id}}"}');
    await page.click("#cancel-edit");
  });

  it("switches to Standard Webhooks and extended retries, and rotates the secret, showing until when the old one signs", async () => {
    await page.locator("#webhooks tr").first().locator("button.edit").click();
    await page.selectOption("#scheme", "standard-webhooks");
    await page.selectOption("#retry-schedule", "extended");
    const next = `whsec_${Buffer.alloc(24, 3).toString("base64")}`;
    await page.fill("#secret", next);
    await page.click("#save");
    const row = page.locator("#webhooks tr").first();
    await expect.poll(() => row.locator(".scheme").textContent()).toBe("standard-webhooks");
    expect(await row.locator(".rotation").textContent()).toMatch(/^previous secret signs until /);
    expect(await row.locator(".schedule").textContent()).toBe("extended retries");
    await page.locator("#webhooks tr").first().locator("button.edit").click();
    expect(await page.inputValue("#scheme")).toBe("standard-webhooks");
    expect(await page.inputValue("#retry-schedule")).toBe("extended");
    await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-webhooks-kind.png"), fullPage: true });
    await page.click("#cancel-edit");
  });

  it("resends a delivery from the history, and recovers failed ones since a time", async () => {
    await page.locator("#webhooks tr").first().locator("button.history").click();
    await expect.poll(() => page.isVisible("#deliveries-section")).toBe(true);
    const rows = await page.locator("#deliveries tr").count();
    const before = receiver.received.length;
    // The failed test delivery, sent again to a receiver that answers 200 now.
    const webhookRow = page.locator("#webhooks tr").first();
    expect(await webhookRow.locator(".status").textContent()).toBe("errored");
    await page.locator("#deliveries tr").first().locator("button.resend").click();
    await expect.poll(() => receiver.received.length).toBe(before + 1);
    expect(receiver.received.at(-1)!.headers["x-webhook-event"]).toBe("test.ping");
    await expect.poll(() => page.locator("#deliveries tr").count(), { timeout: 5_000 }).toBe(rows + 1);
    // The list is read again too: the webhook's last answer is the resend's.
    await expect.poll(() => webhookRow.locator(".status").textContent(), { timeout: 5_000 }).toBe("active");
    expect(await page.inputValue("#recover-since")).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d$/);
    await page.click("#recover");
    // Only test deliveries failed here, and those are never recovered.
    await expect.poll(() => page.textContent("#recover-result")).toBe("0 deliveries queued again");
    await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-webhooks-history.png"), fullPage: true });
  });

  it("shows why and since when a webhook was disabled, and clears it when enabled again", async () => {
    const gone = await Receiver.start(() => "");
    try {
      gone.reply = () => 410;
      const { webhook } = await t.client(key).webhooks.createWebhook({ url: gone.url, events: ["request.failed"], description: "old receiver" });
      await t.admin.webhooks.publishEvent({ event: "request.failed", data: {}, accountId });
      await expect.poll(async () => (await t.client(key).webhooks.getWebhook({ webhookId: webhook!.id })).webhook!.enabled).toBe(false);
      // Made and disabled through the API: the open page shows it without a reload.
      const row = page.locator(`#webhooks tr[data-id="${webhook!.id}"]`);
      await expect.poll(() => row.locator(".status").textContent(), { timeout: 10_000 }).toBe("inactive");
      const why = await row.locator(".disabled-why").textContent();
      expect(why).toMatch(/^Disabled automatically: the receiver answered 410 Gone, since \S/);
      await fs.mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: path.join(ARTIFACTS, "dashboard-webhooks-disabled.png"), fullPage: true });

      await row.locator("button.toggle").click();
      // Enabled again; errored, as its last answer was the 410.
      await expect.poll(() => row.locator(".status").textContent()).toBe("errored");
      expect(await row.locator(".disabled-why").count()).toBe(0);
      await row.locator("button.toggle").click();
      await expect.poll(() => row.locator(".disabled-why").textContent()).toMatch(/^Disabled by hand, since \S/);
    } finally {
      await gone.stop();
    }
  });

  it("logs out", async () => {
    await page.click("#logout button");
    await expect.poll(() => page.isVisible("#login")).toBe(true);
    expect(await page.context().cookies()).toEqual([]);
  });
});
