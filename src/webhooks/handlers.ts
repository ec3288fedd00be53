import { WebhookServiceService, type Delivery, type Webhook } from "../../gen/webhook/v1/webhook_service.js";
import type { WebhookRow } from "../platform/db/schema.js";
import { defineService } from "../transport/call.js";
import type { AttemptView } from "./repository.js";
import type { WebhookService } from "./service.js";
import { maskSecret } from "./signature.js";
import { livePreviousSecret } from "./signing.js";

export function webhookService(webhooks: WebhookService) {
  return defineService(
    WebhookServiceService,
    "webhooks",
    {
      listWebhooks: async (_request, ctx) => ({
        webhooks: (await webhooks.list(ctx.principal)).map((row) => toWebhook(row, { masked: true })),
      }),
      createWebhook: async (request, ctx) => ({ webhook: toWebhook(await webhooks.create(ctx.principal, request)) }),
      getWebhook: async (request, ctx) => ({ webhook: toWebhook(await webhooks.get(ctx.principal, request.webhookId)) }),
      updateWebhook: async (request, ctx) => ({ webhook: toWebhook(await webhooks.update(ctx.principal, request)) }),
      deleteWebhook: async (request, ctx) => {
        await webhooks.delete(ctx.principal, request.webhookId);
        return {};
      },
      testWebhook: async (request, ctx) => webhooks.test(ctx.principal, request.webhookId),
      listDeliveries: async (request, ctx) => ({
        deliveries: (await webhooks.deliveries(ctx.principal, request.webhookId, request.limit)).map(toDelivery),
      }),
      resendDelivery: async (request, ctx) => webhooks.resend(ctx.principal, request.webhookId, request.deliveryId),
      recoverDeliveries: async (request, ctx) => webhooks.recover(ctx.principal, request.webhookId, request.since),
      validateUrl: async (request) => webhooks.validateUrl(request.url),
      publishEvent: async (request, ctx) => webhooks.publish(ctx.principal, request),
    },
    { methodScopes: { publishEvent: "events:publish" } },
  );
}

/**
 * The dashboard's status indicator: inactive when disabled; errored when enabled but the last
 * delivery failed (a failure is counted, or the last attempt was not 2xx); active otherwise.
 */
function statusOf(row: WebhookRow): string {
  if (!row.enabled) return "inactive";
  const lastFailed = row.last_status !== null && (row.last_status < 200 || row.last_status >= 300);
  return row.failure_count > 0 || lastFailed ? "errored" : "active";
}

function toWebhook(row: WebhookRow, { masked = false } = {}): Webhook {
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    secret: masked ? maskSecret(row.secret) : row.secret,
    enabled: row.enabled,
    description: row.description,
    createdAt: row.created_at,
    lastTriggeredAt: row.last_triggered_at ?? undefined,
    lastStatus: row.last_status ?? 0,
    failureCount: row.failure_count,
    status: statusOf(row),
    kind: row.kind,
    settings: row.settings,
    signatureScheme: row.signature_scheme,
    retrySchedule: row.retry_schedule,
    previousSecretExpiresAt: livePreviousSecret(row, new Date()) ? row.previous_secret_expires_at! : undefined,
    disabledReason: row.disabled_reason ?? "",
    disabledAt: row.disabled_at ?? undefined,
  };
}

function toDelivery(row: AttemptView): Delivery {
  return {
    id: row.id,
    deliveryId: row.delivery_id,
    webhookId: row.webhook_id,
    eventId: row.event_id,
    event: row.event,
    attempt: row.attempt,
    status: row.status,
    success: row.success,
    latencyMs: row.latency_ms,
    error: row.error,
    responseBody: row.response_body,
    createdAt: row.created_at,
    nextAttemptAt: row.next_attempt_at ?? undefined,
  };
}
