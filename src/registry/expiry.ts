import { NAMESPACES_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import type { ChangeFeed } from "./change-feed.js";
import { expireInstances, recordChanges } from "./repository.js";

const BATCH = 1_000;

export interface ExpirySweeperOptions {
  db: Db;
  notifications: Notifications;
  feed: ChangeFeed;
  logger: Logger;
  /** How often to sweep. */
  intervalMs: number;
}

/**
 * Marks instances unhealthy once their TTL has passed without a heartbeat. Every replica sweeps;
 * SKIP LOCKED keeps them from contending; each expiry is recorded as a change in the same
 * transaction, and the namespaces whose counts changed are notified to every replica's cache.
 */
export class ExpirySweeper {
  private readonly periodic: Periodic;
  private readonly db: Db;
  private readonly notifications: Notifications;
  private readonly feed: ChangeFeed;
  private readonly logger: Logger;
  private readonly intervalMs: number;

  constructor({ db, notifications, feed, logger, intervalMs }: ExpirySweeperOptions) {
    this.db = db;
    this.notifications = notifications;
    this.feed = feed;
    this.logger = logger;
    this.intervalMs = intervalMs;
    this.periodic = new Periodic(() => this.sweep(), logger, "expiry_sweep_failed");
  }

  start(): void {
    this.periodic.start(this.intervalMs);
  }

  async stop(): Promise<void> {
    await this.periodic.stop();
  }

  /** One pass; returns how many namespaces changed. */
  async sweep(): Promise<number> {
    let changed = 0;
    for (;;) {
      const { expired, revision } = await this.db.transaction().execute(async (tx) => {
        const expired = await expireInstances(tx, BATCH);
        return { expired, revision: await recordChanges(tx, expired.map((e) => ({ instanceId: e.id, kind: "expired" as const }))) };
      });
      this.feed.announce(revision);
      const namespaces = [...new Set(expired.map((e) => e.namespace))];
      await this.notifications.publishAll(NAMESPACES_CHANNEL, namespaces);
      changed += namespaces.length;
      if (namespaces.length === 0) return changed;
      this.logger.info({ event: "instances_expired", namespaces }, "instances turned unhealthy");
    }
  }
}
