import { renderKind } from "./kinds/index.js";
import type { ClaimedDelivery } from "./repository.js";
import { signatureHeaders } from "./signing.js";

export interface DeliveryRequest {
  body: string;
  headers: Record<string, string>;
}

/**
 * The request one attempt sends: the webhook's kind shapes the body, and the standard X-Webhook-* headers (plus
 * X-Webhook-Id, stable across retries) come with every kind; the webhook's signature scheme signs
 * the bytes sent.
 */
export function deliveryRequest(delivery: ClaimedDelivery, sentAt: Date): DeliveryRequest {
  const payload = renderKind(delivery, sentAt);
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    "User-Agent": "Service-Webhook/1.0",
    "X-Webhook-Event": delivery.event,
    "X-Webhook-Timestamp": delivery.occurred_at.toISOString(),
    "X-Webhook-Id": delivery.id,
    ...payload.headers,
    ...signatureHeaders(delivery, delivery.id, payload.body, sentAt),
  };
  return { body: payload.body, headers };
}
