import type { Config } from "../config.js";
import { createDb, migrateToLatest, type Db } from "./db/database.js";
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "./db/embedded-postgres.js";
import type { Notifications } from "./db/notifications.js";
import type { Part } from "./lifecycle.js";
import type { Logger } from "./logger.js";
import type { Metrics } from "./metrics.js";
import type { SsrfGuard } from "./ssrf.js";

/** What every capability's module is wired from. */
export interface Platform {
  config: Config;
  logger: Logger;
  db: Db;
  notifications: Notifications;
  metrics: Metrics;
  /** Checks every outbound URL a caller names (webhook targets, imported media). */
  guard: SsrfGuard;
}

/** An open, migrated database; stop() closes the pool, then the embedded server if there is one. */
export interface Database extends Part {
  url: string;
  db: Db;
  stop(): Promise<void>;
}

/** The database: the configured server, or a private embedded one under DATA_DIR, migrated to the latest schema. */
export async function openDatabase(config: Config, logger: Logger, poolSize = config.databasePoolSize): Promise<Database> {
  const { url, embedded } = await databaseServer(config, logger);
  const db = createDb(url, poolSize, logger);
  const stop = async () => {
    await db.destroy();
    await embedded?.stop();
  };
  try {
    await migrateToLatest(db, logger);
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
  return { url, db, stop };
}

async function databaseServer(config: Config, logger: Logger): Promise<{ url: string; embedded: EmbeddedPostgresHandle | undefined }> {
  if (config.databaseUrl) return { url: config.databaseUrl, embedded: undefined };
  const embedded = await startEmbeddedPostgres(config.dataDir, logger);
  return { url: embedded.url, embedded };
}
