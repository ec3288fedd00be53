import { createHmac } from "node:crypto";
import type { EventView } from "./event-summary.js";

/**
 * What Magic Hour's own webhooks send: `{"type": <event>, "payload": <the object>}`, signed with
 * `magic-hour-event-signature`, the hex HMAC-SHA256 of `<timestamp>.<body>` keyed by the secret,
 * and `magic-hour-event-timestamp` in Unix seconds. A receiver written for Magic Hour keeps working.
 */
export function magicHourMessage(view: EventView): object {
  return { type: view.event, payload: view.data };
}

export function magicHourHeaders(secret: string, body: string, sentAt: Date): Record<string, string> {
  const timestamp = String(Math.floor(sentAt.getTime() / 1000));
  const signature = createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex");
  return { "magic-hour-event-signature": signature, "magic-hour-event-timestamp": timestamp };
}
