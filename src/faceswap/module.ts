import fs from "node:fs/promises";
import path from "node:path";
import type { Config } from "../config.js";
import type { BlobStore } from "../platform/blobs/blob-store.js";
import { LocalBlobStore } from "../platform/blobs/local-blob-store.js";
import { S3BlobStore } from "../platform/blobs/s3-blob-store.js";
import { UrlSigner } from "../platform/blobs/signed-urls.js";
import { sharedSigningSecret } from "../platform/blobs/signing-secret.js";
import { MediaProbes } from "../platform/media/probes.js";
import type { Logger } from "../platform/logger.js";
import type { Platform } from "../platform/module.js";
import { blobRoutes } from "../transport/http/blob-routes.js";
import type { Capability } from "../transport/module.js";
import { AssetJanitor } from "./asset-janitor.js";
import type { EventSink } from "./events.js";
import { faceSwapServices } from "./handlers.js";
import { JobRunner } from "./job-runner.js";
import { JobMetrics } from "./metrics.js";
import { createFaceSwapEngine } from "./render/index.js";
import { FaceSwapService } from "./service.js";
import { SourceResolver } from "./sources.js";

export interface FaceSwapModuleOptions {
  /** Where video.* events go (the webhooks). */
  events: EventSink;
  /** The base of signed blob URLs; it names the HTTP port, known once the servers listen. */
  publicUrl: () => string;
}

/**
 * Face swap jobs: uploads and blob routes, the API, the renderer and the job workers. start() runs
 * the workers and the asset janitor; stop() hands running jobs back to the queue, then closes the
 * renderer and the URL importer.
 */
export async function faceSwapModule(platform: Platform, { events, publicUrl }: FaceSwapModuleOptions): Promise<Capability> {
  const { config, db, notifications, logger, metrics, guard } = platform;
  const jobMetrics = new JobMetrics(metrics, db);
  const blobs = await openBlobStore(config, logger);
  const probes = new MediaProbes(db, blobs);
  const signer = new UrlSigner(config.blobs.signingSecret ?? (await sharedSigningSecret(db)), publicUrl);
  const sources = new SourceResolver({
    store: blobs,
    probes,
    guard,
    limits: {
      videoBytes: config.blobs.maxVideoBytes,
      imageBytes: config.blobs.maxImageBytes,
      fetchTimeoutMs: config.faceswap.fetchTimeoutMs,
    },
  });
  const service = new FaceSwapService({
    db,
    store: blobs,
    signer,
    sources,
    notifications,
    events,
    uploadLimits: {
      videoBytes: config.blobs.maxVideoBytes,
      imageBytes: config.blobs.maxImageBytes,
      audioBytes: config.blobs.maxAudioBytes,
    },
    metrics: jobMetrics,
  });
  const engine = createFaceSwapEngine({ workers: config.faceswap.renderThreads, logger });
  const jobs = new JobRunner({
    db,
    store: blobs,
    renderer: engine,
    detector: engine,
    notifications,
    events,
    logger,
    metrics: jobMetrics,
    settings: config.faceswap,
  });
  const janitor = new AssetJanitor({
    db,
    store: blobs,
    probes,
    logger,
    retentionMs: config.faceswap.assetRetentionMs,
    intervalMs: config.faceswap.assetSweepMs,
  });
  return {
    services: faceSwapServices(service),
    routes: [blobRoutes({ store: blobs, signer, logger, onUploaded: (key, size) => probes.probe(key, size) })],
    start: () => {
      jobs.start();
      janitor.start();
    },
    stop: async () => {
      await janitor.stop();
      await jobs.stop();
      await engine.close();
      await sources.close();
    },
  };
}

/**
 * The blob store: the configured S3 bucket, or DATA_DIR/blobs. S3's spool and copies live in
 * DATA_DIR/tmp/s3, emptied at start (what a killed process left there belongs to nobody).
 */
async function openBlobStore(config: Config, logger: Logger): Promise<BlobStore> {
  if (!config.blobs.s3) return new LocalBlobStore(path.join(config.dataDir, "blobs"));
  const tempDir = path.join(config.dataDir, "tmp", "s3");
  await fs.rm(tempDir, { recursive: true, force: true });
  return new S3BlobStore({ ...config.blobs.s3, tempDir, logger });
}
