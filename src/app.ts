import { authModule } from "./auth/module.js";
import type { Config } from "./config.js";
import { faceSwapModule } from "./faceswap/module.js";
import { namespacesModule } from "./namespaces/module.js";
import { isNamespaceToken } from "./namespaces/rules.js";
import type { Authenticator } from "./platform/auth.js";
import type { Db } from "./platform/db/database.js";
import { Notifications } from "./platform/db/notifications.js";
import { Lifecycle } from "./platform/lifecycle.js";
import type { Logger } from "./platform/logger.js";
import { Metrics } from "./platform/metrics.js";
import { openDatabase, type Platform } from "./platform/module.js";
import { registerProcessMetrics } from "./platform/process-metrics.js";
import { SsrfGuard } from "./platform/ssrf.js";
import { registryModule } from "./registry/module.js";
import { transportModule } from "./transport/module.js";
import { webhooksModule } from "./webhooks/module.js";

export interface App {
  grpcPort: number;
  httpPort: number;
  db: Db;
  /** Drains both servers (health NOT_SERVING first), stops the workers, then closes the database. */
  stop(): Promise<void>;
}

/**
 * Composition root: database -> capabilities -> servers. Everything is wired before anything starts
 * (listeners must be registered before the notification connection joins their channels); the
 * parts then start in the order given here and stop in reverse.
 */
export async function startApp(config: Config, logger: Logger): Promise<App> {
  const life = new Lifecycle();
  const app = await life.open(async () => {
    const database = await openDatabase(config, logger);
    await life.start(database);
    const metrics = new Metrics();
    registerProcessMetrics(metrics);
    const platform: Platform = {
      config,
      logger,
      db: database.db,
      notifications: new Notifications(database.url, logger),
      metrics,
      guard: new SsrfGuard({ allowPrivate: config.webhooks.allowPrivate }),
    };

    const namespaces = namespacesModule(platform);
    const auth = authModule(platform);
    const authenticate: Authenticator = (credential) =>
      credential && isNamespaceToken(credential.token)
        ? namespaces.service.principalOfToken(credential.token)
        : auth.service.authenticate(credential);
    const registry = registryModule(platform, namespaces.cache);
    const webhooks = webhooksModule(platform, authenticate);
    const faceSwap = await faceSwapModule(platform, {
      events: webhooks.service,
      // Called only while serving, once `transport` exists and knows its port.
      publicUrl: () => config.publicUrl ?? `http://localhost:${transport.httpPort}`,
    });
    const transport = transportModule({
      platform,
      authenticate,
      keyChanges: auth.service.onKeyChange,
      capabilities: [auth, namespaces, registry, webhooks, faceSwap],
    });

    await life.start(platform.notifications, auth, namespaces, registry, webhooks, faceSwap, transport);
    logger.info({ event: "started", grpc_port: transport.grpcPort, http_port: transport.httpPort }, "service started");
    return { grpcPort: transport.grpcPort, httpPort: transport.httpPort, db: database.db };
  });

  let stopping: Promise<void> | undefined;
  return {
    ...app,
    stop: () =>
      (stopping ??= life.stop().then(() => {
        logger.info({ event: "stopped" }, "stopped");
      })),
  };
}
