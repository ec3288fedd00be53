/**
 * Every event the platform emits, in one list. Subscriptions may name other events (or "*"); an
 * unknown name in a subscription simply never matches, so a receiver may subscribe to an event before
 * this service emits it. Publishing accepts any
 * well-formed name, so a new event needs no change here to flow, only to be listed in the dashboard.
 */
export const EVENT_CATALOG = [
  { name: "request.completed", description: "a proxied request completed successfully" },
  { name: "request.failed", description: "a proxied request failed after all retries and fallback" },
  { name: "quota.exceeded", description: "an API key crossed a budget or quota threshold" },
  { name: "test.ping", description: "a synthetic event from the test endpoint" },
  { name: "video.started", description: "a face swap job started rendering" },
  { name: "video.completed", description: "a face swap job completed; its outputs are downloadable" },
  { name: "video.errored", description: "a face swap job failed; its credits were refunded" },
  { name: "webhook.disabled", description: "one of the account's webhooks was disabled automatically" },
] as const;

/** `*`, or lowercase dotted words such as `request.completed`. */
export const EVENT_NAME = /^(\*|[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+)$/;
/**
 * Characters an event name may have: it travels in the X-Webhook-Event header, and a 20,000-character
 * one made receivers answer 431 to every delivery (each counting toward disabling the webhook).
 */
export const EVENT_NAME_MAX = 128;

/** The body every receiver gets: the exact bytes that are signed. */
export function eventBody(event: string, occurredAt: Date, data: Record<string, unknown>): string {
  return JSON.stringify({ event, timestamp: occurredAt.toISOString(), data });
}
