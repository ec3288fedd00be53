import { afterAll, afterEach, beforeAll } from "vitest";
import { createAccountWithKey } from "./accounts.js";
import { startTestApp, type TestApp } from "./app.js";
import { createTestDatabase } from "./database.js";
import { Receiver } from "./receiver.js";

/**
 * A test file's app on its own database, an account allowed to manage webhooks and publish, and
 * receivers on loopback that are stopped after each test. Short backoff and timeout by default.
 */
export function useWebhookApp(env: Record<string, string> = {}) {
  let t: TestApp | undefined;
  let user: { accountId: string; key: string } | undefined;
  let receivers: Receiver[] = [];
  beforeAll(async () => {
    t = await startTestApp(await createTestDatabase(), { WEBHOOK_RETRY_BASE_MS: "100", WEBHOOK_TIMEOUT_MS: "2000", ...env });
    user = await createAccountWithKey(t, ["webhooks", "events:publish"]);
  });
  afterAll(async () => {
    await t?.stop();
  });
  afterEach(async () => {
    await Promise.all(receivers.map((r) => r.stop()));
    receivers = [];
  });
  return {
    get t(): TestApp {
      return t!;
    },
    get user(): { accountId: string; key: string } {
      return user!;
    },
    api: () => t!.client(user!.key).webhooks,
    /** A receiver that answers 200 unless told otherwise; `secret` checks the X-Webhook-Signature header. */
    receiver: async (secret: () => string = () => ""): Promise<Receiver> => {
      const r = await Receiver.start(secret);
      receivers.push(r);
      return r;
    },
  };
}
