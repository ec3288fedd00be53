import fs from "node:fs/promises";
import path from "node:path";
import { accountService, adminService } from "./auth/handlers.js";
import { AuthService } from "./auth/service.js";
import type { Config } from "./config.js";
import { AssetJanitor } from "./faceswap/asset-janitor.js";
import { faceSwapServices } from "./faceswap/handlers.js";
import { JobRunner } from "./faceswap/job-runner.js";
import { JobMetrics } from "./faceswap/metrics.js";
import { createFaceSwapEngine } from "./faceswap/render/index.js";
import type { Renderer } from "./faceswap/renderer.js";
import { FaceSwapService } from "./faceswap/service.js";
import { SourceResolver } from "./faceswap/sources.js";
import type { BlobStore } from "./platform/blobs/blob-store.js";
import { LocalBlobStore } from "./platform/blobs/local-blob-store.js";
import { S3BlobStore } from "./platform/blobs/s3-blob-store.js";
import { UrlSigner } from "./platform/blobs/signed-urls.js";
import { sharedSigningSecret } from "./platform/blobs/signing-secret.js";
import { NamespaceCache } from "./namespaces/cache.js";
import { namespaceService } from "./namespaces/handlers.js";
import { isNamespaceToken } from "./namespaces/rules.js";
import { NamespaceService } from "./namespaces/service.js";
import { createDb, migrateToLatest, type Db } from "./platform/db/database.js";
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "./platform/db/embedded-postgres.js";
import { Notifications } from "./platform/db/notifications.js";
import { MediaProbes } from "./platform/media/probes.js";
import type { Logger } from "./platform/logger.js";
import { Metrics } from "./platform/metrics.js";
import { registerProcessMetrics } from "./platform/process-metrics.js";
import type { Authenticator } from "./platform/auth.js";
import { ExpirySweeper } from "./registry/expiry.js";
import { registryService } from "./registry/handlers.js";
import { HeartbeatBatcher } from "./registry/heartbeats.js";
import { RegistryService } from "./registry/service.js";
import { dashboardRoutes } from "./webhooks/dashboard.js";
import { Dispatcher } from "./webhooks/dispatcher.js";
import { webhookService } from "./webhooks/handlers.js";
import { WebhookHttpClient } from "./webhooks/outbound.js";
import { WebhookService } from "./webhooks/service.js";
import { SsrfGuard } from "./platform/ssrf.js";
import { startGrpcServer, type GrpcServer } from "./transport/grpc/server.js";
import { blobRoutes } from "./transport/http/blob-routes.js";
import { metricsRoute } from "./transport/http/metrics-route.js";
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

/**
 * The blob store: the configured S3 bucket, or DATA_DIR/blobs. S3's spool and copies live in
 * DATA_DIR/tmp/s3, emptied at start (what a killed process left there belongs to nobody).
 */
async function openBlobStore(config: Config): Promise<BlobStore> {
  if (!config.blobs.s3) return new LocalBlobStore(path.join(config.dataDir, "blobs"));
  const tempDir = path.join(config.dataDir, "tmp", "s3");
  await fs.rm(tempDir, { recursive: true, force: true });
  return new S3BlobStore({ ...config.blobs.s3, tempDir });
}

/** Composition root: database -> domain services -> transports. */
export async function startApp(config: Config, logger: Logger): Promise<App> {
  const { url, embedded } = await openDatabase(config, logger);
  const db = createDb(url, config.databasePoolSize, logger);
  const notifications = new Notifications(url, logger);
  let grpc: GrpcServer | undefined;
  let http: HttpServer | undefined;
  let sweeper: ExpirySweeper | undefined;
  let namespaceCache: NamespaceCache | undefined;
  let dispatcher: Dispatcher | undefined;
  let jobs: JobRunner | undefined;
  let janitor: AssetJanitor | undefined;
  let renderer: Renderer | undefined;
  let sources: SourceResolver | undefined;
  let serving = false;

  const publicUrl = () => config.publicUrl ?? `http://localhost:${http?.port ?? config.httpPort}`;

  const closeStorage = async () => {
    await janitor?.stop();
    await jobs?.stop();
    await renderer?.close();
    await sources?.close();
    await dispatcher?.stop();
    await sweeper?.stop();
    await namespaceCache?.stopChecks();
    await notifications.stop();
    await db.destroy();
    await embedded?.stop();
  };

  try {
    await migrateToLatest(db, logger);
    const metrics = new Metrics();
    registerProcessMetrics(metrics);
    const jobMetrics = new JobMetrics(metrics, db);

    const auth = new AuthService(db, notifications, logger);
    namespaceCache = new NamespaceCache(db, notifications, logger);
    const namespaces = new NamespaceService(db, notifications, namespaceCache);
    const heartbeats = new HeartbeatBatcher(db, notifications, logger);
    const registry = new RegistryService({ db, notifications, namespaces: namespaceCache, heartbeats });
    sweeper = new ExpirySweeper({ db, notifications, logger, intervalMs: config.expirySweepMs });
    const guard = new SsrfGuard({ allowPrivate: config.webhooks.allowPrivate });
    dispatcher = new Dispatcher({
      db,
      http: new WebhookHttpClient({ guard, timeoutMs: config.webhooks.timeoutMs }),
      notifications,
      logger,
      metrics,
      settings: config.webhooks,
    });
    const webhooks = new WebhookService(db, guard, dispatcher);

    const blobs = await openBlobStore(config);
    const probes = new MediaProbes(db, blobs);
    const signer = new UrlSigner(config.blobs.signingSecret ?? (await sharedSigningSecret(db)), () => publicUrl());
    sources = new SourceResolver({
      store: blobs,
      probes,
      guard,
      limits: {
        videoBytes: config.blobs.maxVideoBytes,
        imageBytes: config.blobs.maxImageBytes,
        fetchTimeoutMs: config.faceswap.fetchTimeoutMs,
      },
    });
    const faceSwap = new FaceSwapService({
      db,
      store: blobs,
      signer,
      sources,
      notifications,
      events: webhooks,
      uploadLimits: {
        videoBytes: config.blobs.maxVideoBytes,
        imageBytes: config.blobs.maxImageBytes,
        audioBytes: config.blobs.maxAudioBytes,
      },
      metrics: jobMetrics,
    });
    const engine = createFaceSwapEngine({ workers: config.faceswap.renderThreads, logger });
    renderer = engine;
    jobs = new JobRunner({
      db,
      store: blobs,
      renderer,
      detector: engine,
      notifications,
      events: webhooks,
      logger,
      metrics: jobMetrics,
      settings: config.faceswap,
    });
    janitor = new AssetJanitor({
      db,
      store: blobs,
      probes,
      logger,
      retentionMs: config.faceswap.assetRetentionMs,
      intervalMs: config.faceswap.assetSweepMs,
    });
    await notifications.start();
    await auth.bootstrap(config.adminToken);
    sweeper.start();
    namespaceCache.startChecks(config.cacheCheckMs);
    dispatcher.start();
    jobs.start();
    janitor.start();

    const authenticate: Authenticator = (credential) =>
      credential && isNamespaceToken(credential.token)
        ? namespaces.principalOfToken(credential.token)
        : auth.authenticate(credential);
    const router = new Router({
      services: [
        adminService(auth),
        accountService(auth),
        namespaceService(namespaces),
        registryService(registry),
        webhookService(webhooks),
        ...faceSwapServices(faceSwap),
      ],
      authenticate,
      logger,
      metrics,
    });
    grpc = await startGrpcServer(router, config.host, config.grpcPort);
    http = await startHttpServer({
      transcoder: new Transcoder(router),
      routes: [
        metricsRoute(metrics, authenticate, config.metricsPublic),
        dashboardRoutes(authenticate),
        blobRoutes({ store: blobs, signer, logger, onUploaded: (key, size) => probes.probe(key, size) }),
      ],
      host: config.host,
      port: config.httpPort,
      logger,
      isServing: () => serving,
    });
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
