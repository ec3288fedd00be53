import type { CreateWebhookRequest, PublishEventRequest, UpdateWebhookRequest } from "../../gen/webhook/v1/webhook_service.js";
import { isAdmin, type Principal } from "../platform/auth.js";
import { isForeignKeyViolation, type Db } from "../platform/db/database.js";
import type { WebhookKind, WebhookRow } from "../platform/db/schema.js";
import { Code, failedPrecondition, invalidArgument, notFound, permissionDenied, RpcError, Violations } from "../platform/errors.js";
import { canonicalId, isUuid } from "../platform/ids.js";
import type { Dispatcher } from "./dispatcher.js";
import { EVENT_NAME, EVENT_NAME_MAX, eventBody } from "./events.js";
import { checkKind } from "./kinds/index.js";
import { checkRetrySchedule } from "./retry-schedule.js";
import * as repo from "./repository.js";
import { checkScheme, checkStandardSecret, generateSecretFor, isStandardSecret, livePreviousSecret, PREVIOUS_SECRET_TTL_MS } from "./signing.js";
import type { SsrfGuard, UrlProblem } from "../platform/ssrf.js";
import { TickBatcher } from "../platform/tick-batcher.js";

const MAX_EVENTS = 64;
const MAX_DESCRIPTION = 1_000;
const MIN_SECRET = 16;
const MAX_SECRET = 500;
const DEFAULT_DELIVERIES_LIMIT = 20;
const MAX_DELIVERIES_LIMIT = 100;
/** Room for a UUID, a hash or a client's own scheme, and nothing that needs escaping in a header. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

const URL_PROBLEMS: Record<UrlProblem, string> = {
  invalid_url: "must be an http(s) URL of at most 2000 characters without credentials",
  blocked_private: "points to a private, loopback or otherwise internal address",
  unresolvable: "its host does not resolve",
};

/** Webhook subscriptions of the caller's account, event publishing, and the test delivery. */
export class WebhookService {
  /**
   * Events published in the same tick are stored by one statement; a tick's statement does not wait
   * for the previous one, so a slow commit never holds back the publishers that follow.
   */
  private readonly publisher = new TickBatcher<repo.NewEvent, repo.StoredEvent>({
    write: (events) => this.store(events),
    overlap: true,
  });

  constructor(
    private readonly db: Db,
    private readonly guard: SsrfGuard,
    private readonly dispatcher: Dispatcher,
  ) {}

  list(principal: Principal): Promise<WebhookRow[]> {
    return repo.listWebhooks(this.db, principal.accountId);
  }

  async create(principal: Principal, request: CreateWebhookRequest): Promise<WebhookRow> {
    const violations = new Violations();
    if (request.url === "") violations.add("url", "is required");
    const events = checkEvents(violations, request.events);
    checkDescription(violations, request.description);
    if (request.secret !== "") checkSecret(violations, request.secret);
    const kind = checkKind(violations, request.kind || "generic", request.settings);
    const scheme = checkScheme(violations, request.signatureScheme || "seed");
    const retrySchedule = checkRetrySchedule(violations, request.retrySchedule || "seed");
    if (scheme === "standard-webhooks" && request.secret !== "") checkStandardSecret(violations, request.secret);
    violations.throwIfAny();
    await this.checkUrl(request.url);
    // Each check returned its value, or added a violation and threw above.
    return repo.insertWebhook(this.db, {
      accountId: principal.accountId,
      url: request.url,
      events: events.length > 0 ? events : ["*"],
      secret: request.secret || generateSecretFor(scheme!),
      description: request.description,
      kind: kind!,
      settings: request.settings,
      signatureScheme: scheme!,
      retrySchedule: retrySchedule!,
    });
  }

  async get(principal: Principal, webhookId: string): Promise<WebhookRow> {
    requireWebhookId(webhookId);
    const row = isUuid(webhookId) ? await repo.findWebhook(this.db, principal.accountId, webhookId) : undefined;
    if (!row) throw webhookNotFound(webhookId);
    return row;
  }

  async update(principal: Principal, request: UpdateWebhookRequest): Promise<WebhookRow> {
    const violations = new Violations();
    if (request.url === "") violations.add("url", "must not be empty");
    const events = checkEvents(violations, request.events);
    if (request.description !== undefined) checkDescription(violations, request.description);
    if (request.secret !== undefined) checkSecret(violations, request.secret);
    const signatureScheme = request.signatureScheme === undefined ? undefined : checkScheme(violations, request.signatureScheme);
    const retrySchedule = request.retrySchedule === undefined ? undefined : checkRetrySchedule(violations, request.retrySchedule);
    // Kind and scheme checks depend on the stored webhook: load it first so one error names every bad field.
    checkWebhookId(violations, request.webhookId);
    if (request.webhookId === "") violations.throwIfAny();
    const current = await this.get(principal, request.webhookId);
    const format = kindChange(violations, current, request);
    checkSchemeSecret(violations, current, request);
    violations.throwIfAny();
    if (request.url !== undefined) await this.checkUrl(request.url);
    const patch: repo.WebhookPatch = {
      url: request.url,
      secret: request.secret,
      events: events.length > 0 ? events : undefined,
      description: request.description,
      enabled: request.enabled,
      ...format,
      signatureScheme,
      retrySchedule,
    };
    // A replaced secret that is no Standard Webhooks key cannot sign in that scheme: it is dropped
    // rather than said to sign for another day.
    if (request.secret !== undefined || signatureScheme !== undefined) {
      const previous = request.secret !== undefined && request.secret !== current.secret ? current.secret : current.previous_secret;
      const scheme = signatureScheme ?? current.signature_scheme;
      if (scheme === "standard-webhooks" && previous !== null && !isStandardSecret(previous)) patch.dropPreviousSecret = true;
    }
    // An update that sets nothing (an empty body, or only unknown keys) changes nothing, as a PATCH would.
    if (Object.values(patch).every((value) => value === undefined)) return current;
    const row = await repo.updateWebhook(this.db, principal.accountId, request.webhookId, patch, PREVIOUS_SECRET_TTL_MS);
    if (!row) throw webhookNotFound(request.webhookId);
    return row;
  }

  async delete(principal: Principal, webhookId: string): Promise<void> {
    requireWebhookId(webhookId);
    if (!isUuid(webhookId) || !(await this.db.transaction().execute((tx) => repo.deleteWebhook(tx, principal.accountId, webhookId)))) {
      throw webhookNotFound(webhookId);
    }
  }

  /** One test.ping, sent now and tried once; its attempt joins the delivery history. */
  async test(principal: Principal, webhookId: string): Promise<{ delivered: boolean; status: number; error: string }> {
    const webhook = await this.get(principal, webhookId);
    const occurredAt = new Date();
    const body = eventBody("test.ping", occurredAt, {
      message: "This is a test delivery from the webhook dashboard.",
      webhookId: webhook.id,
    });
    const deliveryId = await repo.insertTestDelivery(this.db, {
      accountId: principal.accountId,
      webhookId: webhook.id,
      body,
      occurredAt,
    });
    const outcome = await this.dispatcher.attempt({
      id: deliveryId,
      webhook_id: webhook.id,
      attempt: 1,
      retries: false,
      url: webhook.url,
      secret: webhook.secret,
      enabled: true,
      kind: webhook.kind,
      settings: webhook.settings,
      signature_scheme: webhook.signature_scheme,
      previous_secret: livePreviousSecret(webhook, occurredAt),
      retry_schedule: webhook.retry_schedule,
      event: "test.ping",
      body,
      occurred_at: occurredAt,
    });
    return { delivered: outcome.success, status: outcome.status, error: outcome.error };
  }

  async deliveries(principal: Principal, webhookId: string, limit: number): Promise<repo.AttemptView[]> {
    const violations = new Violations();
    checkWebhookId(violations, webhookId);
    if (limit < 0 || limit > MAX_DELIVERIES_LIMIT) {
      violations.add("limit", `must be from 1 to ${MAX_DELIVERIES_LIMIT} (0 or absent means ${DEFAULT_DELIVERIES_LIMIT})`);
    }
    violations.throwIfAny();
    const webhook = await this.get(principal, webhookId);
    return repo.listAttempts(this.db, webhook.id, limit || DEFAULT_DELIVERIES_LIMIT);
  }

  /** The event of one delivery, sent to the webhook again as a new delivery. */
  async resend(principal: Principal, webhookId: string, deliveryId: string): Promise<{ deliveryId: string; eventId: string }> {
    const violations = new Violations();
    checkWebhookId(violations, webhookId);
    if (deliveryId === "") violations.add("delivery_id", "is required");
    violations.throwIfAny();
    const webhook = await this.enabledWebhook(principal, webhookId, "resending");
    const resent = isUuid(deliveryId) ? await this.copyDelivery(webhook.id, deliveryId) : undefined;
    if (!resent) {
      throw new RpcError(Code.NOT_FOUND, `delivery "${deliveryId}" of webhook "${webhook.id}" not found`, {
        reason: "DELIVERY_NOT_FOUND",
        fieldViolations: [{ field: "delivery_id", description: "is not a delivery of this webhook" }],
      });
    }
    this.dispatcher.wakeAll();
    return resent;
  }

  private async copyDelivery(webhookId: string, deliveryId: string): Promise<{ deliveryId: string; eventId: string } | undefined> {
    try {
      return await repo.resendDelivery(this.db, webhookId, deliveryId);
    } catch (error) {
      // Retention deleted the event while the copy was being made: the delivery is gone too.
      if (isForeignKeyViolation(error)) return undefined;
      throw error;
    }
  }

  /** Queues again the webhook's deliveries since `since` that failed or were skipped. */
  async recover(principal: Principal, webhookId: string, since: Date | undefined): Promise<{ requeued: number }> {
    const violations = new Violations();
    checkWebhookId(violations, webhookId);
    if (since === undefined) violations.add("since", "is required (an RFC 3339 time)");
    else if (since.getTime() > Date.now()) violations.add("since", "must not be in the future");
    violations.throwIfAny();
    const webhook = await this.enabledWebhook(principal, webhookId, "recovering deliveries");
    const requeued = await repo.requeueFailedDeliveries(this.db, webhook.id, since!);
    if (requeued > 0) this.dispatcher.wakeAll();
    return { requeued };
  }

  /** A disabled webhook's deliveries are skipped, so sending to it again needs it enabled first. */
  private async enabledWebhook(principal: Principal, webhookId: string, doing: string): Promise<WebhookRow> {
    const webhook = await this.get(principal, webhookId);
    if (!webhook.enabled) {
      throw failedPrecondition(`webhook "${webhook.id}" is disabled: enable it before ${doing}`, "WEBHOOK_DISABLED");
    }
    return webhook;
  }

  async validateUrl(url: string): Promise<{ valid: boolean; reason: string }> {
    const verdict = await this.guard.validate(url);
    return verdict.valid ? { valid: true, reason: "" } : { valid: false, reason: verdict.reason };
  }

  /**
   * Stores the event and a delivery per subscribed, enabled webhook of the account, wakes the
   * dispatchers, and returns: the caller never waits on receivers. Events published in the same tick
   * go in one statement, so a burst costs one commit (a WAL flush), not one per event. An
   * idempotency key already used for the account in the last 24 hours answers its first event.
   */
  async publish(principal: Principal, request: PublishEventRequest): Promise<repo.StoredEvent> {
    const violations = new Violations();
    if (request.event === "") violations.add("event", "is required");
    else if (request.event.length > EVENT_NAME_MAX) violations.add("event", `must be at most ${EVENT_NAME_MAX} characters`);
    else if (request.event === "*" || !EVENT_NAME.test(request.event)) {
      violations.add("event", "must be a dotted lowercase name such as request.completed");
    }
    const accountId = canonicalId(request.accountId || principal.accountId);
    if (!isUuid(accountId)) violations.add("account_id", "must be an account id (a UUID)");
    if (request.idempotencyKey !== "" && !IDEMPOTENCY_KEY.test(request.idempotencyKey)) {
      violations.add("idempotency_key", "must be 1..255 visible ASCII characters, without spaces (a UUID, for example)");
    }
    violations.throwIfAny();
    if (accountId !== principal.accountId && !isAdmin(principal)) {
      throw permissionDenied("only an admin key may publish into another account", "CROSS_ACCOUNT_PUBLISH");
    }
    const occurredAt = new Date();
    return this.publisher.add({
      accountId,
      name: request.event,
      body: eventBody(request.event, occurredAt, request.data ?? {}),
      occurredAt,
      idempotencyKey: request.idempotencyKey || undefined,
    });
  }

  private async store(events: repo.NewEvent[]): Promise<repo.StoredEvent[]> {
    const reservation = this.dispatcher.reserve(events.length);
    let batch: repo.PublishedBatch | undefined;
    try {
      batch = await repo.insertEventsWithDeliveries(this.db, events, reservation);
    } finally {
      this.dispatcher.handOff(reservation, batch);
    }
    // Deliveries this replica did not take wait in the queue: wake whichever dispatcher is free.
    if (batch.stored.reduce((sum, s) => sum + s.deliveries, 0) > batch.claimed.length) this.dispatcher.wakeAll();
    return batch.stored;
  }

  /** An event of another capability (EventSink), written inside that capability's transaction `db`. */
  async emit(db: Db, accountId: string, event: string, data: Record<string, unknown>): Promise<void> {
    const occurredAt = new Date();
    await repo.insertEventWithDeliveries(db, { accountId, name: event, body: eventBody(event, occurredAt, data), occurredAt });
  }

  /** Wakes the dispatchers after emitted events committed. */
  wake(): void {
    this.dispatcher.wakeAll();
  }

  private async checkUrl(url: string): Promise<void> {
    const verdict = await this.guard.validate(url);
    if (!verdict.valid) {
      const description = `${URL_PROBLEMS[verdict.reason]} (${verdict.detail})`;
      throw invalidArgument([{ field: "url", description }], verdict.reason.toUpperCase());
    }
  }
}

/**
 * The kind and settings an update leads to, checked together: settings sent replace the old ones;
 * a new kind without settings starts from none (the old kind's settings mean nothing to it).
 */
function kindChange(
  violations: Violations,
  current: WebhookRow,
  request: UpdateWebhookRequest,
): { kind?: WebhookKind; settings?: Record<string, string> } {
  const newSettings = Object.keys(request.settings).length > 0;
  const newKind = request.kind !== undefined && request.kind !== current.kind;
  if (!newSettings && !newKind) return {};
  const kind = request.kind ?? current.kind;
  const settings = newSettings ? request.settings : {};
  return { kind: checkKind(violations, kind, settings), settings };
}

/** A webhook that ends up on the standard-webhooks scheme needs a secret of that scheme's format. */
function checkSchemeSecret(violations: Violations, current: WebhookRow, request: UpdateWebhookRequest): void {
  if ((request.signatureScheme ?? current.signature_scheme) !== "standard-webhooks") return;
  const changesScheme = request.signatureScheme !== undefined && request.signatureScheme !== current.signature_scheme;
  if (!changesScheme && request.secret === undefined) return;
  checkStandardSecret(violations, request.secret ?? current.secret);
}

function checkEvents(violations: Violations, events: string[]): string[] {
  if (events.length > MAX_EVENTS) violations.add("events", `at most ${MAX_EVENTS} events`);
  events.forEach((event, i) => {
    if (event.length > EVENT_NAME_MAX) violations.add(`events[${i}]`, `must be at most ${EVENT_NAME_MAX} characters`);
    else if (!EVENT_NAME.test(event)) violations.add(`events[${i}]`, `"${event}" is not "*" or a dotted event name`);
  });
  return [...new Set(events)];
}

function checkDescription(violations: Violations, description: string): void {
  if (description.length > MAX_DESCRIPTION) violations.add("description", `must be at most ${MAX_DESCRIPTION} characters`);
}

function checkSecret(violations: Violations, secret: string): void {
  if (secret.length < MIN_SECRET || secret.length > MAX_SECRET) {
    violations.add("secret", `must be ${MIN_SECRET}..${MAX_SECRET} characters`);
  }
}

/** An empty id is a request that forgot it, not a webhook that is not there. */
function checkWebhookId(violations: Violations, webhookId: string): void {
  if (webhookId === "") violations.add("webhook_id", "is required");
}

function requireWebhookId(webhookId: string): void {
  const violations = new Violations();
  checkWebhookId(violations, webhookId);
  violations.throwIfAny();
}

function webhookNotFound(id: string): RpcError {
  return notFound(`webhook "${id}"`, "WEBHOOK_NOT_FOUND");
}
