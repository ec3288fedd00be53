import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import type { Counter, Metrics } from "../platform/metrics.js";
import { deliveryRequest } from "./delivery-request.js";
import type { WebhookHttpClient } from "./outbound.js";
import { nextAttemptAt } from "./retry-schedule.js";
import * as repo from "./repository.js";
import type { ClaimedDelivery } from "./repository.js";

const DELIVERIES_CHANNEL = "webhook_deliveries";
/** 410 Gone: the receiver says the endpoint is gone for good. */
const GONE = 410;
/** The seed: a webhook with this many failed deliveries in a row is disabled. */
const DISABLE_AT = 10;
/** A replica that holds a delivery this long without finishing it is presumed dead. */
const LEASE_MS = 30_000;
/** Sleep at most this long between looks at the queue (notices usually wake the loop sooner). */
const IDLE_POLL_MS = 1_000;
/** With a backlog, claim again once this fraction (1/n) of the concurrency is free. */
const CLAIM_BATCH_DIVISOR = 4;
/** Prune a webhook's history once per this many of its attempts. */
const PRUNE_EVERY = 100;

export interface DispatcherSettings {
  /** Deliveries in flight per replica. */
  concurrency: number;
  /** Backoff unit: seed retries wait 1x, 2x, 4x this (the seed: 1 s); extended gaps are multiples too. */
  retryBaseMs: number;
  /** Newest attempts kept per webhook. */
  historyLimit: number;
}

export interface AttemptResult {
  success: boolean;
  status: number;
  error: string;
}

/**
 * Sends due deliveries in parallel, up to `concurrency` at once, so one slow receiver never holds
 * up the others. Deliveries are queue rows claimed with SKIP LOCKED and a lease; a retry is the same
 * row due later, never a sleep, so a restart or a crash (once its lease runs out) loses nothing,
 * and replicas sharing the database never send the same attempt twice.
 */
export class Dispatcher {
  private readonly inFlight = new Set<Promise<void>>();
  /** The loop, waiting for this many free slots before its next claim. */
  private slotWaiter: { slots: number; resolve: () => void } | undefined;
  /** Outcomes waiting to be recorded; those finished in the same tick go in one statement. */
  private unrecorded: { outcome: repo.AttemptOutcome; done: (disabled: boolean) => void; failed: (e: unknown) => void }[] = [];
  private recording: Promise<void> | undefined;
  private readonly sinceLastPrune = new Map<string, number>();
  private running: Promise<void> | undefined;
  private stopped = false;
  private wake: (() => void) | undefined;
  /** A wake-up that came while the loop was busy; the next idle() returns at once. */
  private woken = false;
  private readonly attempts: Counter<"outcome">;

  constructor(
    private readonly db: Db,
    private readonly http: WebhookHttpClient,
    private readonly notifications: Notifications,
    private readonly logger: Logger,
    private readonly settings: DispatcherSettings,
    metrics: Metrics,
  ) {
    notifications.on(DELIVERIES_CHANNEL, () => this.nudge());
    this.attempts = metrics.counter("atrium_webhook_deliveries_total", "Delivery attempts recorded, by outcome.", ["outcome"]);
  }

  start(): void {
    this.running = this.loop();
  }

  /** Stops claiming, and waits for the attempts in flight to be recorded. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.nudge();
    await this.running;
    await Promise.all(this.inFlight);
    await this.recording;
    await this.http.close();
  }

  /** Tells every replica's dispatcher that deliveries are due. */
  wakeAll(): void {
    this.nudge();
    this.notifications.signal(DELIVERIES_CHANNEL, "");
  }

  private nudge(): void {
    this.woken = true;
    this.wake?.();
  }

  /** Sends one attempt of a claimed delivery and records its outcome. */
  async attempt(delivery: ClaimedDelivery): Promise<AttemptResult> {
    const request = deliveryRequest(delivery, new Date());
    const result = await this.http.post(delivery.url, request.body, request.headers);

    const success = result.status >= 200 && result.status < 300;
    const retryAt = delivery.retries
      ? nextAttemptAt(delivery.retry_schedule, delivery.attempt, result, this.settings.retryBaseMs, new Date())
      : undefined;
    const disabled = await this.record({
      deliveryId: delivery.id,
      webhookId: delivery.webhook_id,
      attempt: delivery.attempt,
      status: result.status,
      success,
      latencyMs: result.latencyMs,
      error: result.error ?? "",
      responseBody: result.responseBody,
      retryAt,
      // A test delivery neither counts toward nor resets the failure count.
      final: delivery.retries && !retryAt,
    });
    this.attempts.inc({ outcome: success ? "delivered" : retryAt ? "retry" : "failed" });
    this.logger.info(
      {
        event: "webhook_attempt",
        delivery_id: delivery.id,
        webhook_id: delivery.webhook_id,
        webhook_event: delivery.event,
        attempt: delivery.attempt,
        status: result.status,
        success,
        latency_ms: result.latencyMs,
        retry_at: retryAt?.toISOString(),
        ...(result.error ? { error: result.error } : {}),
      },
      "webhook attempt",
    );
    // The loop may be asleep until a later due time; a retry due sooner must wake it.
    if (retryAt) this.nudge();
    if (disabled) {
      this.logger.warn({ event: "webhook_disabled", webhook_id: delivery.webhook_id }, "webhook disabled after repeated failures");
    }
    // A test delivery tells nothing about the webhook's deliveries, so only a real one disables.
    if (result.status === GONE && delivery.retries && (await repo.disableWebhook(this.db, delivery.webhook_id))) {
      this.logger.warn({ event: "webhook_disabled", webhook_id: delivery.webhook_id, reason: "gone" }, "webhook disabled: receiver answered 410 Gone");
    }
    // History trimming is housekeeping: its failure must not look like an unrecorded attempt.
    this.pruneNowAndThen(delivery.webhook_id).catch((error: unknown) =>
      this.logger.warn({ event: "webhook_prune_failed", webhook_id: delivery.webhook_id, err: error }, "prune failed"),
    );
    return { success, status: result.status, error: result.error ?? "" };
  }

  /** Resolves once the outcome is recorded, with whether it disabled the webhook. */
  private record(outcome: repo.AttemptOutcome): Promise<boolean> {
    return new Promise((done, failed) => {
      this.unrecorded.push({ outcome, done, failed });
      if (this.unrecorded.length === 1 && !this.recording) setImmediate(() => this.flushRecords());
    });
  }

  private flushRecords(): void {
    if (this.recording || this.unrecorded.length === 0) return;
    const batch = this.unrecorded;
    this.unrecorded = [];
    this.recording = repo
      .recordAttempts(this.db, batch.map((b) => b.outcome), DISABLE_AT)
      .then(
        (disabled) => {
          // The webhook's last final outcome in the batch is the one that disabled it.
          const disabler = new Map<string, (typeof batch)[number]>();
          for (const b of batch) if (b.outcome.final && disabled.includes(b.outcome.webhookId)) disabler.set(b.outcome.webhookId, b);
          for (const b of batch) b.done(disabler.get(b.outcome.webhookId) === b);
        },
        (error: unknown) => {
          for (const b of batch) b.failed(error);
        },
      )
      .finally(() => {
        this.recording = undefined;
        this.flushRecords();
      });
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      const free = this.settings.concurrency - this.inFlight.size;
      let claimed: ClaimedDelivery[] = [];
      try {
        claimed = await repo.claimDueDeliveries(this.db, free, LEASE_MS);
      } catch (error) {
        this.logger.warn({ event: "webhook_claim_failed", err: error }, "could not claim deliveries");
      }
      for (const delivery of claimed) this.track(this.send(delivery));
      // A full claim means more may be due. Each claim is a round trip and a commit, so the next one
      // waits for a batch of free slots rather than one: the deliveries still in flight keep the
      // receivers busy meanwhile.
      if (claimed.length > 0 && claimed.length === free) {
        await this.slotsFree(Math.ceil(this.settings.concurrency / CLAIM_BATCH_DIVISOR));
        continue;
      }
      await this.idle();
    }
  }

  private slotsFree(slots: number): Promise<void> {
    if (this.settings.concurrency - this.inFlight.size >= slots || this.stopped) return Promise.resolve();
    return new Promise((resolve) => (this.slotWaiter = { slots, resolve }));
  }

  /** Waits for a notice, a retry scheduled here, the next due retry, or the poll interval. */
  private async idle(): Promise<void> {
    this.woken = false;
    let delay = IDLE_POLL_MS;
    try {
      const due = await repo.nextDueAt(this.db);
      if (due) delay = Math.max(0, Math.min(delay, due.getTime() - Date.now()));
    } catch {
      // keep the poll interval
    }
    if (delay === 0 || this.stopped || this.woken) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, delay);
      this.wake = done;
    });
  }

  private async send(delivery: ClaimedDelivery): Promise<void> {
    try {
      if (!delivery.enabled) {
        await repo.skipDelivery(this.db, delivery.id);
        return;
      }
      await this.attempt(delivery);
    } catch (error) {
      // Not recorded: the lease runs out and the delivery is claimed again.
      this.logger.error({ event: "webhook_attempt_failed", delivery_id: delivery.id, err: error }, "attempt failed");
    }
  }

  private track(work: Promise<void>): void {
    this.inFlight.add(work);
    void work.finally(() => {
      this.inFlight.delete(work);
      const waiter = this.slotWaiter;
      if (waiter && this.settings.concurrency - this.inFlight.size >= waiter.slots) {
        this.slotWaiter = undefined;
        waiter.resolve();
      }
    });
  }

  /** History is trimmed in steps, so a webhook may briefly hold up to a step more than the limit. */
  private async pruneNowAndThen(webhookId: string): Promise<void> {
    const count = (this.sinceLastPrune.get(webhookId) ?? 0) + 1;
    if (count < Math.min(PRUNE_EVERY, this.settings.historyLimit)) {
      this.sinceLastPrune.set(webhookId, count);
      return;
    }
    this.sinceLastPrune.delete(webhookId);
    await repo.pruneAttempts(this.db, webhookId, this.settings.historyLimit);
  }
}
