import type { Db } from "../platform/db/database.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import * as repo from "./repository.js";

/** How often expired keys are pruned; a key past its 24 hours is already ignored before then. */
const INTERVAL_MS = 10 * 60 * 1000;

/**
 * Deletes PublishEvent idempotency keys past their 24 hours, so the table holds one day of keys.
 * Every replica prunes; deleting twice is harmless.
 */
export class PublishKeyExpiry {
  private readonly periodic: Periodic;

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
  ) {
    this.periodic = new Periodic(() => this.sweep(), logger, "publish_key_sweep_failed");
  }

  start(): void {
    this.periodic.start(INTERVAL_MS);
  }

  async stop(): Promise<void> {
    await this.periodic.stop();
  }

  /** One pass; returns how many keys went. */
  async sweep(): Promise<number> {
    const pruned = await repo.pruneExpiredPublishKeys(this.db);
    if (pruned > 0) this.logger.info({ event: "publish_keys_expired", keys: pruned }, "expired idempotency keys deleted");
    return pruned;
  }
}
