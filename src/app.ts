import { adminService } from "./auth/handlers.js";
import { AuthService } from "./auth/service.js";
import type { Config } from "./config.js";
import { NamespaceCache } from "./namespaces/cache.js";
import { namespaceService } from "./namespaces/handlers.js";
import { NamespaceService } from "./namespaces/service.js";
import { createDb, migrateToLatest, type Db } from "./platform/db/database.js";
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "./platform/db/embedded-postgres.js";
import { Notifications } from "./platform/db/notifications.js";
import type { Logger } from "./platform/logger.js";
import { startGrpcServer, type GrpcServer } from "./transport/grpc/server.js";
import { startHttpServer, type HttpServer } from "./transport/http/server.js";
import { Transcoder } from "./transport/http/transcoder.js";
import { Router } from "./transport/router.js";

export interface App {
  grpcPort: number;
  httpPort: number;
  db: Db;
  /** Drains both servers (health NOT_SERVING first), then closes the database. */
  stop(): Promise<void>;
}

/** The database: the configured server, or a private embedded one under DATA_DIR. */
export async function openDatabase(
  config: Config,
  logger: Logger,
): Promise<{ url: string; embedded: EmbeddedPostgresHandle | undefined }> {
  if (config.databaseUrl) return { url: config.databaseUrl, embedded: undefined };
  const embedded = await startEmbeddedPostgres(config.dataDir, logger);
  return { url: embedded.url, embedded };
}

/** Composition root: database -> domain services -> transports. */
export async function startApp(config: Config, logger: Logger): Promise<App> {
  const { url, embedded } = await openDatabase(config, logger);
  const db = createDb(url, config.databasePoolSize);
  const notifications = new Notifications(url, logger);
  let grpc: GrpcServer | undefined;
  let http: HttpServer | undefined;
  let serving = false;

  const closeStorage = async () => {
    await notifications.stop();
    await db.destroy();
    await embedded?.stop();
  };

  try {
    await migrateToLatest(db, logger);

    const auth = new AuthService(db, notifications, logger);
    const namespaceCache = new NamespaceCache(db, notifications);
    const namespaces = new NamespaceService(db, notifications, namespaceCache);
    await notifications.start();
    await auth.bootstrap(config.adminToken);

    const router = new Router([adminService(auth), namespaceService(namespaces)], auth.authenticate, logger);
    grpc = await startGrpcServer(router, config.host, config.grpcPort);
    http = await startHttpServer(new Transcoder(router), config.host, config.httpPort, logger, () => serving);
    serving = true;
    logger.info({ event: "started", grpc_port: grpc.port, http_port: http.port }, "service started");
  } catch (error) {
    await Promise.allSettled([grpc?.shutdown(0), http?.shutdown(0)]);
    await closeStorage().catch(() => undefined);
    throw error;
  }

  const grpcServer = grpc;
  const httpServer = http;
  let stopping: Promise<void> | undefined;
  return {
    grpcPort: grpcServer.port,
    httpPort: httpServer.port,
    db,
    stop: () =>
      (stopping ??= (async () => {
        serving = false;
        grpcServer.setNotServing();
        logger.info({ event: "stopping" }, "draining");
        await Promise.all([grpcServer.shutdown(config.shutdownGraceMs), httpServer.shutdown(config.shutdownGraceMs)]);
        await closeStorage();
        logger.info({ event: "stopped" }, "stopped");
      })()),
  };
}
