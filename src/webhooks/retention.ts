import type { Db } from "../platform/db/database.js";
import type { Logger } from "../platform/logger.js";
import { Periodic } from "../platform/periodic.js";
import * as repo from "./repository.js";

/** How often each replica sweeps; an idempotency key past its 24 hours is already ignored before then. */
const INTERVAL_MS = 10 * 60 * 1000;
/** Events looked at per step: each step is one short statement, so the sweep never holds locks for long. */
const EVENTS_PER_STEP = 500;

export interface RetentionSweep {
  /** Idempotency keys past their 24 hours. */
  keys: number;
  events: number;
  /** Deliveries that went with their events (their attempts went too). */
  deliveries: number;
}

/**
 * Keeps the webhook tables bounded: PublishEvent idempotency keys go after their 24 hours, and an
 * event goes `retentionMs` after it was published, with its deliveries and their attempts (an
 * event whose delivery is still pending stays until it is done). Every replica sweeps; deleting
 * twice is harmless.
 */
export class WebhookRetention {
  private readonly periodic: Periodic;
  private stopping = false;

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
    private readonly retentionMs: number,
    private readonly eventsPerStep = EVENTS_PER_STEP,
  ) {
    this.periodic = new Periodic(() => this.sweep(), logger, "webhook_retention_sweep_failed");
  }

  start(): void {
    this.periodic.start(INTERVAL_MS);
  }

  /** Stops the timer; a sweep in progress ends after its current step. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.periodic.stop();
  }

  /** One pass over everything published before `now` minus the retention. */
  async sweep(now = new Date()): Promise<RetentionSweep> {
    const keys = await repo.pruneExpiredPublishKeys(this.db);
    if (keys > 0) this.logger.info({ event: "publish_keys_expired", keys }, "expired idempotency keys deleted");
    const cutoff = new Date(now.getTime() - this.retentionMs);
    const swept: RetentionSweep = { keys, events: 0, deliveries: 0 };
    for (const ids of ["v7", "older"] as const) {
      let after: repo.EventCursor | undefined;
      while (!this.stopping) {
        const step = await this.db.transaction().execute((tx) => repo.pruneEventsBefore(tx, ids, cutoff, after, this.eventsPerStep));
        if (step.last === undefined) break;
        after = step.last;
        swept.events += step.events;
        swept.deliveries += step.deliveries;
        // A step whose events all wait on pending deliveries deleted nothing: no line for it.
        if (step.events > 0) {
          this.logger.info(
            { event: "webhook_events_expired", events: step.events, deliveries: step.deliveries, total_events: swept.events },
            "expired webhook events deleted",
          );
        }
      }
    }
    return swept;
  }
}
