import { sql } from "kysely";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import { NAMESPACES_CHANNEL } from "../namespaces/cache.js";
import { renewInstances, type HeartbeatOutcome, type HeartbeatTarget } from "./repository.js";

const MAX_BATCH = 2_000;

interface Waiter {
  target: HeartbeatTarget;
  resolve(outcome: HeartbeatOutcome | undefined): void;
  reject(error: unknown): void;
}

/**
 * Heartbeats arrive by the thousand per second and each only moves a timestamp, so they are written
 * in batches: while one batch is being written the next one gathers, and each caller is answered
 * when its batch has committed. The batch commits without waiting for the disk flush (a heartbeat
 * lost in a crash costs at most one TTL of health), and only instances that come back to health
 * notify the namespace cache.
 */
export class HeartbeatBatcher {
  private pending: Waiter[] = [];
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly notifications: Notifications,
    private readonly logger: Logger,
  ) {}

  /** Renews the instance; undefined when no such instance is in that namespace and service. */
  renew(target: HeartbeatTarget): Promise<HeartbeatOutcome | undefined> {
    return new Promise((resolve, reject) => {
      this.pending.push({ target, resolve, reject });
      this.flushing ??= this.drain();
    });
  }

  /** Waits for every queued heartbeat to be written. */
  async idle(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  private async drain(): Promise<void> {
    // Let the heartbeats that arrive in the same tick join the first batch.
    await new Promise((resolve) => setImmediate(resolve));
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0, MAX_BATCH);
      try {
        const outcomes = await this.write(batch.map((w) => w.target));
        for (const waiter of batch) waiter.resolve(outcomes.get(waiter.target.instanceId));
      } catch (error) {
        this.logger.error({ event: "heartbeat_batch_failed", size: batch.length, err: error }, "heartbeat batch failed");
        for (const waiter of batch) waiter.reject(error);
      }
    }
    this.flushing = undefined;
  }

  private async write(targets: HeartbeatTarget[]): Promise<Map<string, HeartbeatOutcome>> {
    const unique = [...new Map(targets.map((t) => [t.instanceId, t])).values()];
    const outcomes = await this.db.transaction().execute(async (tx) => {
      await sql`set local synchronous_commit = off`.execute(tx);
      return renewInstances(tx, unique);
    });
    await this.notifications.publishAll(
      NAMESPACES_CHANNEL,
      outcomes.filter((o) => o.revived).map((o) => o.namespace),
    );
    // A target naming the right instance under the wrong namespace or service finds nothing.
    const byId = new Map(outcomes.map((o) => [o.instanceId, o]));
    return new Map(
      targets.flatMap((t) => {
        const outcome = byId.get(t.instanceId);
        return outcome && outcome.namespace === t.namespace ? [[t.instanceId, outcome]] : [];
      }),
    );
  }
}
