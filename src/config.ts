import path from "node:path";
import { isNamespaceToken } from "./namespaces/rules.js";

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

export interface Config {
  /** Port of the gRPC server; 0 picks a free one. */
  grpcPort: number;
  /** Port of the HTTP server (transcoded API, dashboard); 0 picks a free one. */
  httpPort: number;
  /** Address both servers bind to. */
  host: string;
  /** PostgreSQL URL; when absent a private embedded PostgreSQL runs under dataDir. */
  databaseUrl: string | undefined;
  /** Where the embedded database (and later blobs) live. */
  dataDir: string;
  /** The bootstrap admin key, used only when the database has no API key yet. */
  adminToken: string | undefined;
  logLevel: LogLevel;
  /** Connections in the PostgreSQL pool. */
  databasePoolSize: number;
  /** How long shutdown waits for in-flight calls before cancelling them. */
  shutdownGraceMs: number;
  /** How often each replica marks instances whose heartbeat TTL ran out unhealthy. */
  expirySweepMs: number;
  /** How often each replica compares its namespace cache with the database (for lost notices). */
  cacheCheckMs: number;
  /** Newest recorded changes kept per namespace. */
  namespaceHistoryLimit: number;
  /** Registry changes kept for watchers resuming from a revision. */
  registryChangesKept: number;
  /**
   * The base URL clients reach the HTTP server at, used in signed upload and download URLs; default
   * http://localhost:<HTTP port>.
   */
  publicUrl: string | undefined;
  /** Serve /metrics without an API key (a scraper on a private network); else it takes an admin key. */
  metricsPublic: boolean;
  blobs: {
    /** Uploads and outputs go to this S3-compatible bucket when set; else to DATA_DIR/blobs. */
    s3: S3Config | undefined;
    /** Key of the signed blob URLs; default a random one kept in the database (shared by replicas). */
    signingSecret: string | undefined;
    maxVideoBytes: number;
    maxImageBytes: number;
    maxAudioBytes: number;
  };
  faceswap: {
    /** Jobs one replica renders at once. */
    concurrency: number;
    /** Worker threads of one replica's renderer. */
    renderThreads: number;
    /** Load the renderer's models at start rather than when the first job arrives. */
    preload: boolean;
    /** A job whose worker stops renewing its lease for this long is claimed again. */
    leaseMs: number;
    /** Claims of one job before it ends in error (worker_lost). */
    maxAttempts: number;
    /** How often idle workers look for jobs whose lease ran out. */
    pollMs: number;
    /** Bound on fetching an input given as a URL. */
    fetchTimeoutMs: number;
    /** Inputs (uploads, URL imports, face crops) are deleted this long after they were stored; 0 keeps them. */
    assetRetentionMs: number;
    /** How often each replica looks for expired inputs. */
    assetSweepMs: number;
  };
  webhooks: {
    /** Let webhooks target private and loopback addresses (local setups and tests only). */
    allowPrivate: boolean;
    /** Bound on one delivery attempt (10 s unless configured), so a stalled receiver does not hold a slot. */
    timeoutMs: number;
    /** Backoff unit: retries wait 1x, 2x, 4x this (1 s unless configured). */
    retryBaseMs: number;
    /** Deliveries in flight per replica. */
    concurrency: number;
    /** Newest delivery attempts kept per webhook. */
    historyLimit: number;
    /** Events, with their deliveries and attempts, are deleted this long after they were published. */
    retentionMs: number;
  };
}

export interface S3Config {
  bucket: string;
  region: string;
  /** For S3-compatible servers (MinIO, R2, ...); default AWS. */
  endpoint: string | undefined;
  forcePathStyle: boolean;
  /** Prefix of every key in the bucket. */
  prefix: string;
}

const LOG_LEVELS: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join("\n  ")}`);
    this.name = "ConfigError";
  }
}

/** Reads every setting from the environment, validating all of them before failing once. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const problems: string[] = [];

  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const value = Number(raw);
    if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
      problems.push(`${name}: must be an integer from ${min} to ${max}, got "${raw}"`);
      return fallback;
    }
    return value;
  };

  const bool = (name: string, fallback: boolean): boolean => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if (raw === "true" || raw === "1") return true;
    if (raw === "false" || raw === "0") return false;
    problems.push(`${name}: must be true or false, got "${raw}"`);
    return fallback;
  };

  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    problems.push(`DATABASE_URL: must be a postgres:// or postgresql:// URL`);
  }

  const adminToken = env.ADMIN_TOKEN || undefined;
  // A token goes in an Authorization header, which carries visible ASCII only: any other character
  // made a key that was created and could never be presented.
  if (adminToken !== undefined && (adminToken.length < 16 || adminToken.length > 200 || !/^[\x21-\x7e]+$/.test(adminToken))) {
    problems.push(`ADMIN_TOKEN: must be 16..200 visible ASCII characters (no spaces)`);
  } else if (adminToken !== undefined && isNamespaceToken(adminToken)) {
    problems.push(`ADMIN_TOKEN: must not be 32 hex characters, the shape of a namespace token`);
  }

  const logLevel = (env.LOG_LEVEL || "info") as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) {
    problems.push(`LOG_LEVEL: must be one of ${LOG_LEVELS.join(", ")}, got "${env.LOG_LEVEL}"`);
  }

  const publicUrl = env.PUBLIC_URL ? env.PUBLIC_URL.replace(/\/+$/, "") : undefined;
  if (publicUrl !== undefined && !/^https?:\/\/[^/?#]+(\/[^?#]*)?$/.test(publicUrl)) {
    problems.push(`PUBLIC_URL: must be an http(s) URL without query, e.g. https://api.example.com`);
  }
  const signingSecret = env.BLOB_SIGNING_SECRET || undefined;
  if (signingSecret !== undefined && signingSecret.length < 32) problems.push(`BLOB_SIGNING_SECRET: must be at least 32 characters`);
  const s3Endpoint = env.S3_ENDPOINT || undefined;
  if (s3Endpoint !== undefined && !/^https?:\/\//.test(s3Endpoint)) problems.push(`S3_ENDPOINT: must be an http(s) URL`);
  // Without a bucket the blobs stay on local disk; an S3 setting on its own would be silently ignored.
  if (!env.S3_BUCKET) {
    for (const name of ["S3_REGION", "S3_ENDPOINT", "S3_FORCE_PATH_STYLE", "S3_PREFIX"]) {
      if (env[name]) problems.push(`${name}: has no effect without S3_BUCKET; set S3_BUCKET too, or unset ${name}`);
    }
  }
  const s3: S3Config | undefined = env.S3_BUCKET
    ? {
        bucket: env.S3_BUCKET,
        region: env.S3_REGION || "us-east-1",
        endpoint: s3Endpoint,
        forcePathStyle: bool("S3_FORCE_PATH_STYLE", s3Endpoint !== undefined),
        prefix: (env.S3_PREFIX ?? "").replace(/^\/+|\/+$/g, ""),
      }
    : undefined;

  const config: Config = {
    grpcPort: int("GRPC_PORT", 50051, 0, 65535),
    httpPort: int("HTTP_PORT", 8080, 0, 65535),
    host: env.HOST || "0.0.0.0",
    databaseUrl,
    dataDir: path.resolve(env.DATA_DIR || "./data"),
    adminToken,
    logLevel,
    databasePoolSize: int("DATABASE_POOL_SIZE", 10, 1, 1000),
    shutdownGraceMs: int("SHUTDOWN_GRACE_MS", 10_000, 0, 600_000),
    expirySweepMs: int("INSTANCE_EXPIRY_SWEEP_MS", 500, 50, 60_000),
    cacheCheckMs: int("CACHE_CHECK_MS", 5_000, 100, 3_600_000),
    namespaceHistoryLimit: int("NAMESPACE_HISTORY_LIMIT", 1_000, 1, 1_000_000),
    registryChangesKept: int("REGISTRY_CHANGES_KEPT", 10_000, 1, 10_000_000),
    publicUrl,
    metricsPublic: bool("METRICS_PUBLIC", false),
    blobs: {
      s3,
      signingSecret,
      maxVideoBytes: int("UPLOAD_MAX_VIDEO_BYTES", 2 * 1024 ** 3, 1, Number.MAX_SAFE_INTEGER),
      maxImageBytes: int("UPLOAD_MAX_IMAGE_BYTES", 20 * 1024 ** 2, 1, Number.MAX_SAFE_INTEGER),
      maxAudioBytes: int("UPLOAD_MAX_AUDIO_BYTES", 200 * 1024 ** 2, 1, Number.MAX_SAFE_INTEGER),
    },
    faceswap: {
      concurrency: int("RENDER_CONCURRENCY", 1, 0, 64),
      renderThreads: int("RENDER_THREADS", 2, 1, 64),
      preload: bool("RENDER_PRELOAD", true),
      leaseMs: int("JOB_LEASE_MS", 30_000, 500, 3_600_000),
      maxAttempts: int("JOB_MAX_ATTEMPTS", 3, 1, 100),
      pollMs: int("JOB_POLL_MS", 2_000, 50, 600_000),
      fetchTimeoutMs: int("SOURCE_FETCH_TIMEOUT_MS", 120_000, 100, 3_600_000),
      assetRetentionMs: int("ASSET_RETENTION_HOURS", 7 * 24, 0, 100 * 365 * 24) * 3_600_000,
      assetSweepMs: int("ASSET_SWEEP_MS", 3_600_000, 1_000, 86_400_000),
    },
    webhooks: {
      allowPrivate: bool("WEBHOOK_ALLOW_PRIVATE", false),
      timeoutMs: int("WEBHOOK_TIMEOUT_MS", 10_000, 100, 120_000),
      retryBaseMs: int("WEBHOOK_RETRY_BASE_MS", 1_000, 1, 3_600_000),
      concurrency: int("WEBHOOK_CONCURRENCY", 256, 1, 10_000),
      historyLimit: int("WEBHOOK_HISTORY_LIMIT", 1_000, 1, 1_000_000),
      // At least two days: an idempotency key is kept for 24 hours with its event (pending deliveries
      // hold their events whatever the retention).
      retentionMs: int("WEBHOOK_RETENTION_DAYS", 30, 2, 3_650) * 86_400_000,
    },
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
