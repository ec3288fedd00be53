import { WEBHOOK_DELIVERIES_CHANNEL } from "../platform/db/channels.js";
import { isRefusedData, type Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { Logger } from "../platform/logger.js";
import type { CounterSeries, Metrics } from "../platform/metrics.js";
import { TickBatcher } from "../platform/tick-batcher.js";
import { Wakeup } from "../platform/wakeup.js";
import { deliveryRequest, type DeliveryRequest } from "./delivery-request.js";
import { eventBody } from "./events.js";
import { UnsendableBody } from "./kinds/custom-template.js";
import type { PostResult, WebhookHttpClient } from "./outbound.js";
import { nextAttemptAt, stateAfter } from "./retry-schedule.js";
import * as repo from "./repository.js";
import type { ClaimedDelivery } from "./repository.js";

/** 410 Gone: the receiver says the endpoint is gone for good. */
const GONE = 410;
/** A webhook with this many failed deliveries in a row is disabled, so a dead receiver stops costing attempts. */
const DISABLE_AT = 10;
/** A replica that holds a delivery this long without finishing it is presumed dead. */
const LEASE_MS = 30_000;
/** Sleep at most this long between looks at the queue (notices usually wake the loop sooner). */
const IDLE_POLL_MS = 1_000;
/** With a backlog, claim again once this fraction (1/n) of the concurrency is free. */
const CLAIM_BATCH_DIVISOR = 4;
/** Prune a webhook's history once per this many of its attempts. */
const PRUNE_EVERY = 500;
/** A publish claims at most this many of each event's new deliveries for this replica. */
const HAND_OFF_PER_EVENT = 64;

export interface DispatcherSettings {
  /** Deliveries in flight per replica. */
  concurrency: number;
  /** Backoff unit: the default schedule's retries wait 1x, 2x, 4x this; the extended schedule's gaps scale with it too. */
  retryBaseMs: number;
  /** Newest attempts kept per webhook. */
  historyLimit: number;
}

export interface DispatcherOptions {
  db: Db;
  http: WebhookHttpClient;
  notifications: Notifications;
  logger: Logger;
  metrics: Metrics;
  settings: DispatcherSettings;
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
  /** Slots held for deliveries that publishes being stored will hand over. */
  private reserved = 0;
  /**
   * The last claim filled every free slot: older deliveries are waiting, so new ones queue behind
   * them rather than being handed over by their publish.
   */
  private backlogged = false;
  /**
   * The most deliveries an event had in the last publish: slots are held while a publish commits, so
   * holding far more than its events will fan out to would starve the publishes running beside it.
   */
  private fanOut = HAND_OFF_PER_EVENT;
  /** The loop, waiting for this many free slots before its next claim. */
  private slotWaiter: { slots: number; resolve: () => void } | undefined;
  /**
   * Outcomes finished in the same tick are recorded in one statement, one statement at a time. When
   * the database refuses what that statement holds, each outcome is recorded by itself: one it
   * refuses must not leave the others unrecorded, to be sent again once their leases run out. (When
   * it fails for any other reason, an outage, each would fail the same way.)
   */
  private readonly recorder = new TickBatcher<repo.AttemptOutcome, Recorded>({
    write: async (outcomes) => {
      try {
        return (await this.recordAll(outcomes)).map((disabled) => ({ disabled }));
      } catch (error) {
        if (!isRefusedData(error)) throw error;
        const each: Recorded[] = [];
        for (const outcome of outcomes) each.push(await this.recordApart(outcome));
        return each;
      }
    },
  });
  private readonly sinceLastPrune = new Map<string, number>();
  private running: Promise<void> | undefined;
  private stopped = false;
  /** Notices and retries scheduled here cut the loop's idle sleep short. */
  private readonly wakeup = new Wakeup();
  /** Attempts recorded, by outcome: the series held, as a delivery's is counted on a hot path. */
  private readonly attempts: Record<"delivered" | "retry" | "failed", CounterSeries>;
  private readonly db: Db;
  private readonly http: WebhookHttpClient;
  private readonly notifications: Notifications;
  private readonly logger: Logger;
  private readonly settings: DispatcherSettings;

  constructor({ db, http, notifications, logger, metrics, settings }: DispatcherOptions) {
    this.db = db;
    this.http = http;
    this.notifications = notifications;
    this.logger = logger;
    this.settings = settings;
    notifications.on(WEBHOOK_DELIVERIES_CHANNEL, () => this.wakeup.wake());
    const attempts = metrics.counter("atrium_webhook_deliveries_total", "Delivery attempts recorded, by outcome.", ["outcome"]);
    this.attempts = {
      delivered: attempts.seriesOf({ outcome: "delivered" }),
      retry: attempts.seriesOf({ outcome: "retry" }),
      failed: attempts.seriesOf({ outcome: "failed" }),
    };
  }

  start(): void {
    this.running = this.loop();
  }

  /** Stops claiming, and waits for the attempts in flight to be recorded. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeup.wake();
    this.releaseSlotWaiter();
    await this.running;
    await Promise.all(this.inFlight);
    await this.recorder.idle();
    await this.http.close();
  }

  /** Tells every replica's dispatcher that deliveries are due. */
  wakeAll(): void {
    this.wakeup.wake();
    this.notifications.signal(WEBHOOK_DELIVERIES_CHANNEL, "");
  }

  /**
   * Slots a publish about to be stored may claim its new deliveries into, sent here without a
   * claim statement or a wake-up round trip. None while deliveries wait in the queue, so a new event
   * never overtakes older ones. Every reservation is given back with `handOff`.
   */
  reserve(events: number): repo.HandOff {
    const perEvent = Math.min(HAND_OFF_PER_EVENT, 2 * this.fanOut);
    const limit = this.stopped || this.backlogged ? 0 : Math.max(0, Math.min(this.freeSlots(), events * perEvent));
    this.reserved += limit;
    return { limit, leaseMs: LEASE_MS };
  }

  /**
   * Sends the deliveries a publish claimed with `reservation` (none if it failed) and frees the rest
   * of its slots. Once stopping, it sends none: their lease runs out and any replica claims them.
   */
  handOff(reservation: repo.HandOff, batch: repo.PublishedBatch | undefined): void {
    if (batch && batch.stored.length > 0) this.fanOut = Math.max(1, ...batch.stored.map((s) => s.deliveries));
    if (!this.stopped) for (const delivery of batch?.claimed ?? []) this.track(this.send(delivery));
    this.reserved -= reservation.limit;
    this.releaseSlotWaiter();
  }

  /** Sends one attempt of a claimed delivery and records its outcome. */
  async attempt(delivery: ClaimedDelivery): Promise<AttemptResult> {
    const request = buildRequest(delivery);
    const result = "unsendable" in request ? unsent(request.unsendable) : await this.http.post(delivery.url, request.body, request.headers);

    const success = result.status >= 200 && result.status < 300;
    // A request that cannot be made for this event never will be: it fails at once, for good.
    const retryAt =
      delivery.retries && !("unsendable" in request)
        ? nextAttemptAt(delivery.retry_schedule, delivery.attempt, result, this.settings.retryBaseMs, new Date())
        : undefined;
    const recorded = await this.recorder.add({
      deliveryId: delivery.id,
      webhookId: delivery.webhook_id,
      attempt: delivery.attempt,
      status: result.status,
      success,
      latencyMs: result.latencyMs,
      error: result.error ?? "",
      responseBody: result.responseBody,
      retryAt,
      state: stateAfter(result.status, retryAt),
      // A test delivery neither counts toward nor resets the failure count, and never disables.
      final: delivery.retries && !retryAt,
      gone: delivery.retries && result.status === GONE,
    });
    if ("failure" in recorded) throw recorded.failure;
    const { disabled } = recorded;
    this.attempts[success ? "delivered" : retryAt ? "retry" : "failed"].inc();
    // A success is in the history and the metrics already; logging each one at info cost a JSON line
    // and a write(2) per delivery (8 % of the server's busy CPU in the bench profile), and building
    // the line's fields for a level that is off still cost an object per delivery.
    if (!success || this.logger.isLevelEnabled("debug")) {
      this.logger[success ? "debug" : "info"](
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
    }
    // The loop may be asleep until a later due time; a retry due sooner must wake it.
    if (retryAt) this.wakeup.wake();
    if (disabled) {
      this.logger.warn(
        { event: "webhook_disabled", webhook_id: delivery.webhook_id, reason: disabled.disabled_reason, failure_count: disabled.failure_count },
        disabled.disabled_reason === "gone" ? "webhook disabled: receiver answered 410 Gone" : "webhook disabled after repeated failures",
      );
    }
    // History trimming is housekeeping: its failure must not look like an unrecorded attempt.
    this.pruneNowAndThen(delivery.webhook_id).catch((error: unknown) =>
      this.logger.warn({ event: "webhook_prune_failed", webhook_id: delivery.webhook_id, err: error }, "prune failed"),
    );
    return { success, status: result.status, error: result.error ?? "" };
  }

  /**
   * Records the outcomes; says for each which webhook it disabled, if any. A webhook disabled here
   * tells the account's other webhooks (a webhook.disabled event) in the same transaction, so the
   * notice exists exactly when the disable does. A batch without a failed delivery cannot disable
   * anything and stays one statement without a transaction.
   */
  private async recordAll(outcomes: repo.AttemptOutcome[]): Promise<(repo.DisabledWebhook | undefined)[]> {
    const mayDisable = outcomes.some((o) => o.final && !o.success);
    let notices = 0;
    const disabled = mayDisable
      ? await this.db.transaction().execute(async (tx) => {
          const off = await repo.recordAttempts(tx, outcomes, DISABLE_AT);
          if (off.length > 0) {
            const { stored } = await repo.insertEventsWithDeliveries(tx, off.map(disabledNotice));
            notices = stored.reduce((sum, s) => sum + s.deliveries, 0);
          }
          return off;
        })
      : await repo.recordAttempts(this.db, outcomes, DISABLE_AT);
    if (notices > 0) this.wakeAll();
    // The webhook's last final outcome in the batch is the one that disabled it.
    const disabler = new Map<string, repo.AttemptOutcome>();
    for (const o of outcomes) if (o.final && disabled.some((d) => d.id === o.webhookId)) disabler.set(o.webhookId, o);
    return outcomes.map((o) => (disabler.get(o.webhookId) === o ? disabled.find((d) => d.id === o.webhookId) : undefined));
  }

  /**
   * One outcome by itself; refused, it is recorded without what the receiver answered, which is what
   * the database could refuse (the attempt happened, and sending it again would be refused alike).
   */
  private async recordApart(outcome: repo.AttemptOutcome): Promise<Recorded> {
    const record = (o: repo.AttemptOutcome) => this.recordAll([o]).then(([disabled]): Recorded => ({ disabled }));
    try {
      return await record(outcome);
    } catch (error) {
      if (!isRefusedData(error)) return { failure: error };
      const why = `the answer could not be stored (${error instanceof Error ? error.message : String(error)})`;
      return record({ ...outcome, responseBody: "", error: outcome.error ? `${outcome.error}; ${why}` : why }).catch((failure: unknown) => ({ failure }));
    }
  }

  private async loop(): Promise<void> {
    const batch = Math.ceil(this.settings.concurrency / CLAIM_BATCH_DIVISOR);
    while (!this.stopped) {
      const free = this.freeSlots();
      // Every slot is taken (by deliveries in flight, or held for publishes): nothing to claim into.
      if (free <= 0) {
        await this.slotsFree(batch);
        continue;
      }
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
      this.backlogged = claimed.length === free;
      if (this.backlogged) {
        await this.slotsFree(batch);
        continue;
      }
      await this.idle();
    }
  }

  private freeSlots(): number {
    return this.settings.concurrency - this.inFlight.size - this.reserved;
  }

  private slotsFree(slots: number): Promise<void> {
    if (this.freeSlots() >= slots || this.stopped) return Promise.resolve();
    return new Promise((resolve) => (this.slotWaiter = { slots, resolve }));
  }

  private releaseSlotWaiter(): void {
    const waiter = this.slotWaiter;
    if (waiter && (this.freeSlots() >= waiter.slots || this.stopped)) {
      this.slotWaiter = undefined;
      waiter.resolve();
    }
  }

  /** Waits for a notice, a retry scheduled here, the next due retry, or the poll interval. */
  private async idle(): Promise<void> {
    const since = this.wakeup.mark();
    let delay = IDLE_POLL_MS;
    try {
      const due = await repo.nextDueAt(this.db);
      if (due) delay = Math.max(0, Math.min(delay, due.getTime() - Date.now()));
    } catch {
      // keep the poll interval
    }
    if (this.stopped) return;
    await this.wakeup.sleep(delay, since);
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
      this.releaseSlotWaiter();
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
    await repo.pruneHistory(this.db, webhookId, this.settings.historyLimit);
  }
}

/** What recording one outcome came to: the webhook it disabled, if any, or why it was not recorded. */
type Recorded = { disabled: repo.DisabledWebhook | undefined } | { failure: unknown };

/**
 * The request for this attempt, or why none can be made (a custom template's body too large for the
 * event). Any other failure is a fault here, not the webhook's: it is thrown, logged, and the delivery
 * tried again once its lease runs out.
 */
function buildRequest(delivery: ClaimedDelivery): DeliveryRequest | { unsendable: string } {
  try {
    return deliveryRequest(delivery, new Date());
  } catch (error) {
    if (error instanceof UnsendableBody) return { unsendable: `could not make the request: ${error.message}` };
    throw error;
  }
}

function unsent(error: string): PostResult {
  return { status: 0, latencyMs: 0, responseBody: "", error };
}

/**
 * The webhook.disabled event about a webhook just disabled. It names the receiver by host only: a
 * URL's path may hold a token (a Telegram bot's does), and the notice goes to other receivers.
 */
function disabledNotice(webhook: repo.DisabledWebhook): repo.NewEvent {
  const data = {
    webhook_id: webhook.id,
    description: webhook.description,
    host: hostOf(webhook.url),
    reason: webhook.disabled_reason,
    failure_count: webhook.failure_count,
    last_status: webhook.last_status,
    disabled_at: webhook.disabled_at.toISOString(),
  };
  return {
    accountId: webhook.account_id,
    name: "webhook.disabled",
    body: eventBody("webhook.disabled", webhook.disabled_at, data),
    occurredAt: webhook.disabled_at,
  };
}

function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return "";
  }
}
