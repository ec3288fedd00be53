import type { Authenticator } from "../platform/auth.js";
import type { Platform } from "../platform/module.js";
import type { Capability } from "../transport/module.js";
import { dashboardRoutes } from "./dashboard.js";
import { Dispatcher } from "./dispatcher.js";
import { webhookService } from "./handlers.js";
import { WebhookHttpClient } from "./outbound.js";
import { WebhookRetention } from "./retention.js";
import { WebhookService } from "./service.js";

export interface WebhooksModule extends Capability {
  service: WebhookService;
}

/**
 * Webhook subscriptions, publishing and the dashboard; start() runs the dispatcher and the key
 * retention sweep, stop() lets the dispatcher's attempts finish.
 */
export function webhooksModule(platform: Platform, authenticate: Authenticator): WebhooksModule {
  const { config, db, notifications, logger, metrics, guard } = platform;
  const dispatcher = new Dispatcher({
    db,
    http: new WebhookHttpClient({ guard, timeoutMs: config.webhooks.timeoutMs }),
    notifications,
    logger,
    metrics,
    settings: config.webhooks,
  });
  const service = new WebhookService(db, guard, dispatcher);
  const retention = new WebhookRetention(db, logger, config.webhooks.retentionMs);
  return {
    service,
    services: [webhookService(service)],
    routes: [dashboardRoutes(authenticate)],
    start: () => {
      dispatcher.start();
      retention.start();
    },
    stop: async () => {
      await retention.stop();
      await dispatcher.stop();
    },
  };
}
