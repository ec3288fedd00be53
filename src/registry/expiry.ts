import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { NAMESPACES_CHANNEL } from "../namespaces/cache.js";
import { expireInstances } from "./repository.js";

const BATCH = 1_000;

/**
 * Marks instances unhealthy once their TTL has passed without a heartbeat. Every replica sweeps;
 * SKIP LOCKED keeps them from contending, and the namespaces whose counts changed are notified to
 * every replica's cache.
 */
export class ExpirySweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly logger: Logger,
    private readonly intervalMs: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep()
        .then(() => undefined)
        .catch((error: unknown) => this.logger.warn({ event: "expiry_sweep_failed", err: error }, "expiry sweep failed"))
        .finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /** One pass; returns how many namespaces changed. */
  async sweep(): Promise<number> {
    let changed = 0;
    for (;;) {
      const namespaces = await expireInstances(this.db, BATCH);
      await this.notifications.publishAll(NAMESPACES_CHANNEL, namespaces);
      changed += namespaces.length;
      if (namespaces.length === 0) return changed;
      this.logger.info({ event: "instances_expired", namespaces }, "instances turned unhealthy");
    }
  }
}
