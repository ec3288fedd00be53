import { sql } from "kysely";
import { prepared, withoutFlushWait, type Db } from "../platform/db/database.js";
import { uuidv7, uuidv7Floor } from "../platform/ids.js";
import type {
  DeliveryState,
  DisabledReason,
  RetrySchedule,
  SignatureScheme,
  WebhookAttemptRow,
  WebhookKind,
  WebhookRow,
} from "../platform/db/schema.js";

export async function insertWebhook(
  db: Db,
  webhook: {
    accountId: string;
    url: string;
    events: string[];
    secret: string;
    description: string;
    kind: WebhookKind;
    settings: Record<string, string>;
    signatureScheme: SignatureScheme;
    retrySchedule: RetrySchedule;
  },
): Promise<WebhookRow> {
  return db
    .insertInto("webhooks")
    .values({
      account_id: webhook.accountId,
      url: webhook.url,
      events: webhook.events,
      secret: webhook.secret,
      description: webhook.description,
      kind: webhook.kind,
      settings: JSON.stringify(webhook.settings),
      signature_scheme: webhook.signatureScheme,
      retry_schedule: webhook.retrySchedule,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function listWebhooks(db: Db, accountId: string): Promise<WebhookRow[]> {
  return db
    .selectFrom("webhooks")
    .selectAll()
    .where("account_id", "=", accountId)
    .orderBy("created_at", "desc")
    .orderBy("id")
    .execute();
}

export async function findWebhook(db: Db, accountId: string, id: string): Promise<WebhookRow | undefined> {
  return db
    .selectFrom("webhooks")
    .selectAll()
    .where("id", "=", id)
    .where("account_id", "=", accountId)
    .executeTakeFirst();
}

export interface WebhookPatch {
  url?: string;
  secret?: string;
  events?: string[];
  description?: string;
  enabled?: boolean;
  kind?: WebhookKind;
  settings?: Record<string, string>;
  signatureScheme?: SignatureScheme;
  retrySchedule?: RetrySchedule;
  /** Stop signing with the replaced secret (one the webhook's scheme cannot sign with). */
  dropPreviousSecret?: boolean;
}

/**
 * Applies the patch; turning a disabled webhook back on resets its failure count and clears why it
 * was off, turning it off records "manual" and the time, and a new secret
 * keeps the one it replaces signing for `previousSecretTtlMs` (unless the patch drops it).
 */
export async function updateWebhook(
  db: Db,
  accountId: string,
  id: string,
  patch: WebhookPatch,
  previousSecretTtlMs: number,
): Promise<WebhookRow | undefined> {
  return db
    .updateTable("webhooks")
    .set((eb) => ({
      ...(patch.url !== undefined ? { url: patch.url } : {}),
      ...(patch.secret !== undefined
        ? {
            secret: patch.secret,
            previous_secret: eb.case().when("secret", "<>", patch.secret).then(eb.ref("secret")).else(eb.ref("previous_secret")).end(),
            previous_secret_expires_at: eb
              .case()
              .when("secret", "<>", patch.secret)
              .then(sql<Date>`now() + make_interval(secs => ${previousSecretTtlMs / 1000})`)
              .else(eb.ref("previous_secret_expires_at"))
              .end(),
          }
        : {}),
      ...(patch.dropPreviousSecret ? { previous_secret: null, previous_secret_expires_at: null } : {}),
      ...(patch.events !== undefined ? { events: patch.events } : {}),
      ...(patch.description !== undefined ? { description: patch.description } : {}),
      ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
      ...(patch.kind !== undefined ? { kind: patch.kind } : {}),
      ...(patch.settings !== undefined ? { settings: JSON.stringify(patch.settings) } : {}),
      ...(patch.signatureScheme !== undefined ? { signature_scheme: patch.signatureScheme } : {}),
      ...(patch.retrySchedule !== undefined ? { retry_schedule: patch.retrySchedule } : {}),
      ...(patch.enabled === true
        ? {
            failure_count: eb.case().when("enabled", "=", false).then(0).else(eb.ref("failure_count")).end(),
            disabled_reason: null,
            disabled_at: null,
          }
        : {}),
      ...(patch.enabled === false
        ? {
            disabled_reason: eb.case().when("enabled", "=", true).then(sql<DisabledReason>`'manual'`).else(eb.ref("disabled_reason")).end(),
            disabled_at: eb.case().when("enabled", "=", true).then(sql<Date>`now()`).else(eb.ref("disabled_at")).end(),
          }
        : {}),
    }))
    .where("id", "=", id)
    .where("account_id", "=", accountId)
    .returningAll()
    .executeTakeFirst();
}

/**
 * Deletes the webhook with its deliveries and their attempts. Three statements: run it in a
 * transaction. Recording outcomes locks deliveries and then their webhook, so the deliveries go
 * first, in that order too: deleting the webhook first (its foreign key then cascading to the
 * deliveries) deadlocked with an outcome being recorded. Recording, retention and this delete lock
 * deliveries in id order; in the order each one's scan met them, they deadlocked with each other.
 * The cascade still takes any delivery a publish added meanwhile. The attempts are looked for last,
 * with a snapshot taken once the webhook is gone: those of an outcome committed while the deletes
 * waited are not in an earlier one.
 */
export async function deleteWebhook(db: Db, accountId: string, id: string): Promise<boolean> {
  await db
    .deleteFrom("webhook_deliveries")
    .where("id", "in", (eb) =>
      eb
        .selectFrom("webhook_deliveries")
        .select("id")
        .where("webhook_id", "=", eb.selectFrom("webhooks").select("id").where("id", "=", id).where("account_id", "=", accountId))
        .orderBy("id")
        .forUpdate(),
    )
    .execute();
  const gone = await db.deleteFrom("webhooks").where("id", "=", id).where("account_id", "=", accountId).executeTakeFirst();
  if (gone.numDeletedRows === 0n) return false;
  await db.deleteFrom("webhook_attempts").where("webhook_id", "=", id).execute();
  return true;
}

export interface NewEvent {
  accountId: string;
  name: string;
  body: string;
  occurredAt: Date;
  /** A PublishEvent idempotency key; undefined for none. */
  idempotencyKey?: string;
}

export interface StoredEvent {
  eventId: string;
  deliveries: number;
  /** The idempotency key was claimed already: eventId is the first event's and nothing was queued. */
  replayed: boolean;
}

/** How long an idempotency key holds its event. */
export const PUBLISH_KEY_TTL_MS = 24 * 60 * 60 * 1000;
/** Keys claimed before this have expired. */
const PUBLISH_KEY_CUTOFF = sql<Date>`now() - make_interval(secs => ${PUBLISH_KEY_TTL_MS / 1000})`;

/** Stores the event and one pending delivery per enabled subscriber, in one statement. */
export async function insertEventWithDeliveries(db: Db, event: NewEvent): Promise<StoredEvent> {
  const { stored } = await insertEventsWithDeliveries(db, [event]);
  return stored[0]!;
}

/** How many of a batch's new deliveries the publishing replica claims at once, and for how long. */
export interface HandOff {
  limit: number;
  leaseMs: number;
}

export interface PublishedBatch {
  /** One per event, in the order given. */
  stored: StoredEvent[];
  /** The new deliveries claimed for the caller (at most `limit`), as a claim of due deliveries returns them. */
  claimed: ClaimedDelivery[];
}

/** The columns of a claimed delivery that come from its webhook. */
type ClaimedWebhook = Pick<
  ClaimedDelivery,
  "url" | "secret" | "enabled" | "kind" | "settings" | "signature_scheme" | "previous_secret" | "retry_schedule"
>;
/** Those columns, read from `webhooks w`: the replaced secret only while it still signs. */
const CLAIMED_WEBHOOK_COLUMNS = sql`w.url, w.secret, w.enabled, w.kind, w.settings, w.signature_scheme, w.retry_schedule,
  case when w.previous_secret_expires_at > now() then w.previous_secret end as previous_secret`;

/**
 * Stores events and one pending delivery per enabled subscriber of each, in one statement: one
 * round trip and one commit (a WAL flush) however many events. Results are in the order given.
 *
 * An event with an idempotency key first claims the key (the account's first event with it in the
 * batch does); a live claim, made earlier here or committed meanwhile by another replica, wins, and
 * the event is then neither stored nor fanned out. The claim is an upsert on the key's primary key,
 * which waits for a concurrent claim to commit and then returns that claim's event: no read-then-write.
 *
 * Up to `handOff.limit` of the new deliveries are inserted already claimed, with their first
 * attempt started and a lease, exactly as claimDueDeliveries would leave them, and come back with
 * what sending them needs: the publishing replica sends them without a claim statement of its own,
 * and if it dies first their lease runs out and any replica claims them.
 */
export async function insertEventsWithDeliveries(
  db: Db,
  events: NewEvent[],
  handOff: HandOff = { limit: 0, leaseMs: 0 },
): Promise<PublishedBatch> {
  // Ids made here tie each event to its result, which the rows an insert returns do not.
  const ids = events.map(() => uuidv7());
  const { rows } = await sql<
    { event_id: string; deliveries: number; replayed: boolean; seq: number; delivery_id: string | null; webhook_id: string } & ClaimedWebhook
  >`${prepared("webhook_publish")}
    with input as (
      select * from unnest(
        ${ids}::uuid[], ${events.map((e) => e.accountId)}::uuid[], ${events.map((e) => e.name)}::text[],
        ${events.map((e) => e.body)}::text[], ${events.map((e) => e.occurredAt.toISOString())}::timestamptz[],
        ${events.map((e) => e.idempotencyKey ?? null)}::text[]
      ) with ordinality as t(id, account_id, name, body, occurred_at, key, seq)
    ), claims as (
      insert into webhook_publish_keys as k (account_id, key, event_id)
      select distinct on (account_id, key) account_id, key, id from input where key is not null
      order by account_id, key, seq
      -- An expired claim not yet pruned is taken over; a live one stays (the no-op update returns it).
      on conflict (account_id, key) do update
        set event_id = case when k.created_at > ${PUBLISH_KEY_CUTOFF}
                            then k.event_id else excluded.event_id end,
            created_at = case when k.created_at > ${PUBLISH_KEY_CUTOFF}
                              then k.created_at else now() end
      returning account_id, key, event_id
    ), fresh as (
      select i.* from input i
      where i.key is null or exists (select 1 from claims c where c.event_id = i.id)
    ), ev as (
      insert into webhook_events (id, account_id, name, body, occurred_at)
      select id, account_id, name, body, occurred_at from fresh
      returning id, account_id, name
    ), subscribers as (
      -- Locked as the deliveries' foreign key would lock them, but before the insert: a webhook
      -- deleted while this waits for its row is left out, instead of failing the whole statement.
      select w.id, w.account_id, w.events from webhooks w
      where w.enabled and w.account_id in (select account_id from ev)
      for key share
    ), fanout as (
      select ev.id as event_id, w.id as webhook_id, row_number() over () <= ${handOff.limit} as handed
      from ev join subscribers w on w.account_id = ev.account_id and w.events && array['*', ev.name]::text[]
    ), queued as (
      insert into webhook_deliveries (event_id, webhook_id, attempts, locked_until)
      select event_id, webhook_id, case when handed then 1 else 0 end,
             case when handed then now() + make_interval(secs => ${handOff.leaseMs / 1000}) end
      from fanout
      returning id, event_id, webhook_id, attempts = 1 as handed
    ), counts as (
      select event_id, count(*)::int as deliveries from queued group by event_id
    ), handed as (
      select q.event_id, q.id as delivery_id, q.webhook_id, ${CLAIMED_WEBHOOK_COLUMNS}
      from queued q join webhooks w on w.id = q.webhook_id
      where q.handed
    )
    select coalesce(c.event_id, i.id) as event_id, coalesce(n.deliveries, 0) as deliveries,
           coalesce(c.event_id <> i.id, false) as replayed, i.seq, h.delivery_id, h.webhook_id, h.url, h.secret,
           h.enabled, h.kind, h.settings, h.signature_scheme, h.retry_schedule, h.previous_secret
    from input i
    left join claims c on c.account_id = i.account_id and c.key = i.key
    left join counts n on n.event_id = i.id
    left join handed h on h.event_id = i.id
    order by i.seq`.execute(db);
  const stored: StoredEvent[] = [];
  const claimed: ClaimedDelivery[] = [];
  for (const r of rows) {
    // One row per event, or per delivery handed over (its event's columns repeated).
    if (stored.length < r.seq) stored.push({ eventId: r.event_id, deliveries: r.deliveries, replayed: r.replayed });
    if (r.delivery_id === null) continue;
    const event = events[r.seq - 1]!;
    claimed.push({
      id: r.delivery_id,
      webhook_id: r.webhook_id,
      attempt: 1,
      retries: true,
      url: r.url,
      secret: r.secret,
      enabled: r.enabled,
      kind: r.kind,
      settings: r.settings,
      signature_scheme: r.signature_scheme,
      previous_secret: r.previous_secret,
      retry_schedule: r.retry_schedule,
      event: event.name,
      body: event.body,
      occurred_at: event.occurredAt,
    });
  }
  return { stored, claimed };
}

/** Forgets idempotency keys older than their 24 hours; returns how many went. */
export async function pruneExpiredPublishKeys(db: Db): Promise<number> {
  const { numDeletedRows } = await db
    .deleteFrom("webhook_publish_keys")
    .where("created_at", "<=", PUBLISH_KEY_CUTOFF)
    .executeTakeFirst();
  return Number(numDeletedRows);
}

/** Where a step of retention stopped: the last event it looked at. */
export interface EventCursor {
  id: string;
  /** As PostgreSQL prints it: a Date would drop the microseconds, and the step would come back to the row. */
  occurred_at: string;
}

export interface PrunedEvents {
  events: number;
  deliveries: number;
  /** The next step starts after it. Undefined when there were none. */
  last: EventCursor | undefined;
}

/**
 * Which events a retention pass walks: those with version 7 ids, in id order over the primary key,
 * or those with ids made before the switch to version 7 (random, so in no useful order), in
 * publishing order through an index that holds only them.
 */
export type EventIds = "v7" | "older";

/**
 * One step of retention: of up to `limit` events published before `cutoff` after `after`, deletes
 * each with its deliveries (and their attempts), except an event with a delivery still pending,
 * which stays until that delivery is done. Two statements: run it in a transaction.
 *
 * The first locks the events, so no delivery can be added to them (a resend's foreign-key check
 * waits, then finds the event gone); one being resent right now is skipped until the next sweep.
 * The second, with a snapshot taken after those locks, locks the events' deliveries and reads their
 * latest state: a delivery recovered or retried meanwhile holds its event back.
 */
export async function pruneEventsBefore(
  db: Db,
  ids: EventIds,
  cutoff: Date,
  after: EventCursor | undefined,
  limit: number,
): Promise<PrunedEvents> {
  // occurred_at is checked on the id path too: ids below the floor are not all version 7 ones. An id
  // made before the switch is random, and one in about 160 sorts below any floor of these years.
  const old =
    ids === "v7"
      ? await sql<EventCursor>`
          select id, occurred_at::text from webhook_events
          where id > ${after?.id ?? "00000000-0000-0000-0000-000000000000"} and id < ${uuidv7Floor(cutoff)} and occurred_at < ${cutoff}
          order by id
          limit ${limit}
          for update skip locked`.execute(db)
      : await sql<EventCursor>`
          select id, occurred_at::text from webhook_events
          where substr(id::text, 15, 1) <> '7' and occurred_at < ${cutoff}
            and (occurred_at, id) > (${after?.occurred_at ?? "-infinity"}::timestamptz, ${after?.id ?? "00000000-0000-0000-0000-000000000000"})
          order by occurred_at, id
          limit ${limit}
          for update skip locked`.execute(db);
  if (old.rows.length === 0) return { events: 0, deliveries: 0, last: undefined };
  const events = old.rows.map((e) => e.id);
  const { rows } = await sql<{ events: number; deliveries: number; ids: string[] }>`
    with locked as (
      -- Locking returns each row's latest version, not the snapshot's: its state now. In id order,
      -- as a webhook's delete locks them, so the two cannot deadlock.
      select event_id, state, retries from webhook_deliveries where event_id = any (${events}::uuid[])
      order by id
      for update
    ), held as (
      -- A test delivery is pending only until its caller records it; one whose caller died is never
      -- sent again and must not keep its event forever.
      select event_id from locked where state = 'pending' and retries
    ), deliveries as (
      delete from webhook_deliveries
      where event_id = any (${events}::uuid[]) and event_id <> all (array(select event_id from held))
      -- A step lost to a database crash is made by the next sweep.
      and ${withoutFlushWait}
      returning id
    ), events as (
      delete from webhook_events
      where id = any (${events}::uuid[]) and id <> all (array(select event_id from held))
      returning 1
    )
    select (select count(*)::int from events) as events, (select count(*)::int from deliveries) as deliveries,
           array(select id from deliveries) as ids`.execute(db);
  const row = rows[0]!;
  // The attempts go in a statement of their own: one recorded by an outcome that committed while this
  // step waited for its delivery's lock is not in the step's snapshot, and would be left behind.
  await sql`delete from webhook_attempts where delivery_id = any (${row.ids}::uuid[])`.execute(db);
  return { events: row.events, deliveries: row.deliveries, last: old.rows[old.rows.length - 1] };
}

/**
 * A test delivery: an event and a delivery claimed at once by its caller and tried once. It is
 * never due (next_attempt_at infinity), so no dispatcher sends it again if its caller dies.
 */
export async function insertTestDelivery(
  db: Db,
  event: { accountId: string; webhookId: string; body: string; occurredAt: Date },
): Promise<string> {
  const { rows } = await sql<{ id: string }>`
    with ev as (
      insert into webhook_events (account_id, name, body, occurred_at)
      values (${event.accountId}, 'test.ping', ${event.body}, ${event.occurredAt})
      returning id
    )
    insert into webhook_deliveries (event_id, webhook_id, retries, attempts, next_attempt_at)
    select ev.id, ${event.webhookId}, false, 1, 'infinity' from ev
    returning id`.execute(db);
  return rows[0]!.id;
}

export interface ClaimedDelivery {
  id: string;
  webhook_id: string;
  attempt: number;
  retries: boolean;
  url: string;
  secret: string;
  enabled: boolean;
  kind: WebhookKind;
  settings: Record<string, string>;
  signature_scheme: SignatureScheme;
  /** The replaced secret while it still signs, else null. */
  previous_secret: string | null;
  retry_schedule: RetrySchedule;
  event: string;
  body: string;
  occurred_at: Date;
}

/**
 * Claims up to `limit` due deliveries for `leaseMs`: a replica that dies mid-attempt loses its
 * lease and another claims the delivery again. Each claim starts the next attempt, so no attempt
 * number is ever sent twice.
 */
export async function claimDueDeliveries(db: Db, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
  const { rows } = await sql<ClaimedDelivery>`${prepared("webhook_claim")}
    with due as (
      select id from webhook_deliveries
      where state = 'pending' and next_attempt_at <= now() and (locked_until is null or locked_until < now())
      order by next_attempt_at
      limit ${limit}
      for update skip locked
    ), claimed as (
      update webhook_deliveries d
      set locked_until = now() + make_interval(secs => ${leaseMs / 1000}), attempts = d.attempts + 1
      from due where d.id = due.id
      returning d.id, d.webhook_id, d.event_id, d.attempts, d.retries
    )
    select c.id, c.webhook_id, c.attempts as attempt, c.retries, ${CLAIMED_WEBHOOK_COLUMNS},
           e.name as event, e.body, e.occurred_at
    from claimed c join webhooks w on w.id = c.webhook_id join webhook_events e on e.id = c.event_id`.execute(db);
  return rows;
}

/** When the next pending delivery that no replica holds falls due, if any. */
export async function nextDueAt(db: Db): Promise<Date | undefined> {
  const row = await db
    .selectFrom("webhook_deliveries")
    .select((eb) => eb.fn.min("next_attempt_at").as("due"))
    .where("state", "=", "pending")
    // A held delivery (in flight here or on another replica) is not due: counting it would spin the loop.
    .where((eb) => eb.or([eb("locked_until", "is", null), eb("locked_until", "<", sql<Date>`now()`)]))
    .executeTakeFirst();
  return row?.due ?? undefined;
}

export interface AttemptOutcome {
  deliveryId: string;
  webhookId: string;
  attempt: number;
  status: number;
  success: boolean;
  latencyMs: number;
  error: string;
  responseBody: string;
  /** Set when the delivery will be tried again. */
  retryAt: Date | undefined;
  /** Where the attempt leaves the delivery (pending when retryAt is set). */
  state: DeliveryState;
  /** The delivery is over: a success, a final status, or the last attempt. */
  final: boolean;
  /** The receiver answered 410 Gone to a real delivery: the webhook is disabled at once. */
  gone: boolean;
}

/** A webhook that recorded attempts just disabled, as its notice to the account's other webhooks needs it. */
export interface DisabledWebhook {
  id: string;
  account_id: string;
  url: string;
  description: string;
  disabled_reason: DisabledReason;
  disabled_at: Date;
  failure_count: number;
  last_status: number;
}

/**
 * Records attempts and their consequences in one statement, so atomically and in one round trip
 * however many finished together: the history rows; each delivery's state, as the outcome says; and each
 * webhook's counters, applied in the order the attempts finished: last_triggered_at and last_status
 * on every attempt, failure_count reset by a success and raised by a failed delivery, and
 * auto-disabling, with its reason and time, at `disableAt` failures or on 410 Gone. Returns the
 * webhooks these attempts disabled.
 */
export async function recordAttempts(db: Db, outcomes: AttemptOutcome[], disableAt: number): Promise<DisabledWebhook[]> {
  const column = <T>(pick: (o: AttemptOutcome) => T) => outcomes.map(pick);
  // The counters build on w, the row as locked (another replica may have just changed it), not on
  // the statement's snapshot.
  const failures = sql`case when e.last_success is not null then 0 else w.failure_count end + e.new_failures`;
  const turnsOff = sql`w.enabled and (e.gone or (e.any_final and ${failures} >= ${disableAt}))`;
  const { rows } = await sql<DisabledWebhook & { disabled: boolean }>`${prepared("webhook_record")}
    with o as (
      select * from unnest(
        ${column((o) => o.deliveryId)}::uuid[], ${column((o) => o.webhookId)}::uuid[],
        ${column((o) => o.attempt)}::int[], ${column((o) => o.status)}::int[], ${column((o) => o.success)}::bool[],
        ${column((o) => o.latencyMs)}::int[], ${column((o) => o.error)}::text[], ${column((o) => o.responseBody)}::text[],
        ${column((o) => o.retryAt?.toISOString() ?? null)}::timestamptz[], ${column((o) => o.state)}::text[],
        ${column((o) => o.final)}::bool[], ${column((o) => o.gone)}::bool[]
      ) with ordinality as t(delivery_id, webhook_id, attempt, status, success, latency_ms, error, response_body,
                             retry_at, state, final, gone, seq)
      -- Outcomes lost to a database crash mean their deliveries are sent again once their lease
      -- runs out: at least once still holds, so the commit need not wait for the disk.
      where ${withoutFlushWait}
    ), locked as (
      -- In id order, as a webhook's delete locks them: in the order the update meets them, recording
      -- two outcomes of a webhook while it is deleted could deadlock, and lose the batch's outcomes.
      select id from webhook_deliveries where id in (select delivery_id from o) order by id for update
    ), deliveries as (
      update webhook_deliveries d
      set next_attempt_at = coalesce(o.retry_at, d.next_attempt_at), locked_until = null, state = o.state
      from o where d.id = o.delivery_id and d.id in (select id from locked)
      returning d.id
    ), r as (
      -- A webhook deleted while its attempt was in flight took its deliveries along: the update
      -- found none of those, and their outcomes go no further (no attempts of nothing). Filtering by
      -- what the update found spares a lookup of each delivery before it.
      select * from o where delivery_id in (select id from deliveries)
    ), history as (
      insert into webhook_attempts
        (delivery_id, webhook_id, attempt, status, success, latency_ms, error, response_body, next_attempt_at)
      select delivery_id, webhook_id, attempt, status, success, latency_ms, error, response_body, retry_at from r
    ), per_webhook as (
      -- In finishing order: the last status, and the final failures since the last final success.
      select webhook_id, (array_agg(status order by seq desc))[1] as last_status,
             max(seq) filter (where final and success) as last_success, bool_or(final) as any_final,
             bool_or(gone) as gone
      from r group by webhook_id
    ), effect as (
      select p.*, b.enabled as was_enabled,
             (select count(*)::int from r where r.webhook_id = p.webhook_id and r.final and not r.success
              and (p.last_success is null or r.seq > p.last_success)) as new_failures
      from per_webhook p join webhooks b on b.id = p.webhook_id
    )
    update webhooks w
    set last_triggered_at = now(), last_status = e.last_status,
        failure_count = ${failures},
        disabled_reason = case when ${turnsOff} then case when e.gone then 'gone' else 'failures' end else w.disabled_reason end,
        disabled_at = case when ${turnsOff} then now() else w.disabled_at end,
        enabled = w.enabled and not (${turnsOff})
    from effect e
    where w.id = e.webhook_id
    returning w.id, w.account_id, w.url, w.description, w.disabled_reason, w.disabled_at, w.failure_count, w.last_status,
              e.was_enabled and not w.enabled as disabled`.execute(db);
  return rows.filter((r) => r.disabled).map(({ disabled: _, ...webhook }) => webhook);
}

/** Queues the event of one of the webhook's deliveries again, as a new delivery; undefined when it has no such delivery. */
export async function resendDelivery(
  db: Db,
  webhookId: string,
  deliveryId: string,
): Promise<{ deliveryId: string; eventId: string } | undefined> {
  const { rows } = await sql<{ id: string; event_id: string }>`
    insert into webhook_deliveries (event_id, webhook_id)
    select event_id, webhook_id from webhook_deliveries where id = ${deliveryId} and webhook_id = ${webhookId}
    returning id, event_id`.execute(db);
  return rows[0] ? { deliveryId: rows[0].id, eventId: rows[0].event_id } : undefined;
}

/**
 * Puts back in the queue, from their first attempt, the webhook's deliveries created since `since`
 * that failed (state failed, or delivered with a non-2xx final attempt) or were skipped while it
 * was disabled; test deliveries stay as they were. One statement, so all or none. A delivered one
 * whose last attempt was pruned from the history is left alone: it may have succeeded.
 */
export async function requeueFailedDeliveries(db: Db, webhookId: string, since: Date): Promise<number> {
  // The candidates come from two indexes: failed and skipped deliveries by webhook, and failed
  // attempts by webhook (an attempt is never older than its delivery, so `since` bounds both).
  const { numAffectedRows } = await sql`
    update webhook_deliveries d
    set state = 'pending', attempts = 0, next_attempt_at = now(), locked_until = null
    where d.id in (
        select id from webhook_deliveries
        where webhook_id = ${webhookId} and created_at >= ${since} and state in ('failed', 'skipped')
        union
        select delivery_id from webhook_attempts where webhook_id = ${webhookId} and created_at >= ${since} and not success
      )
      and d.webhook_id = ${webhookId} and d.created_at >= ${since} and d.retries
      and (d.state in ('failed', 'skipped')
           or (d.state = 'delivered' and not (
             select a.success from webhook_attempts a where a.delivery_id = d.id order by a.created_at desc limit 1)))`.execute(db);
  return Number(numAffectedRows ?? 0);
}

/** A delivery whose webhook was disabled before its turn is dropped, not sent. */
export async function skipDelivery(db: Db, deliveryId: string): Promise<void> {
  await db
    .updateTable("webhook_deliveries")
    .set({ state: "skipped", locked_until: null })
    .where("id", "=", deliveryId)
    .execute();
}

/** An attempt row with its event's name and id. */
export type AttemptView = WebhookAttemptRow & { event: string; event_id: string };

export async function listAttempts(db: Db, webhookId: string, limit: number): Promise<AttemptView[]> {
  return db
    .selectFrom("webhook_attempts as a")
    .innerJoin("webhook_deliveries as d", "d.id", "a.delivery_id")
    .innerJoin("webhook_events as e", "e.id", "d.event_id")
    .selectAll("a")
    .select(["e.name as event", "e.id as event_id"])
    .where("a.webhook_id", "=", webhookId)
    .orderBy("a.created_at", "desc")
    .limit(limit)
    .execute();
}

/**
 * Keeps only the newest `keep` attempts of a webhook (and any recorded at the same instant as the
 * oldest of them), and drops the delivered deliveries whose attempts all went with them: the history
 * no longer shows them, so they can be neither resent nor recovered. Failed, skipped and pending
 * deliveries stay for recovery and retries. One statement, bounded by the attempts made since the
 * last prune.
 */
export async function pruneHistory(db: Db, webhookId: string, keep: number): Promise<void> {
  // The attempts go as one range of the history's index, below the oldest one kept. Picking them
  // by id from the webhook's whole history, sorted, read and sorted every attempt the webhook had
  // at each prune (the planner scanned the table for it), and looked each one up again to delete it.
  // Arrays rather than IN (subquery) for the deliveries: as joins the planner hashed or merge-joined
  // whole tables.
  await sql`${prepared("webhook_prune")}
    with oldest_kept as (
      select created_at from webhook_attempts where webhook_id = ${webhookId}
      order by created_at desc offset ${keep - 1} limit 1
    ), gone as (
      delete from webhook_attempts
      where webhook_id = ${webhookId} and created_at < (select created_at from oldest_kept)
      -- A prune lost to a database crash is made by the next one.
      and ${withoutFlushWait}
      returning id, delivery_id
    )
    delete from webhook_deliveries d
    where d.id = any (array(select delivery_id from gone)) and d.state = 'delivered'
      -- The statement still sees the attempts it deletes.
      and not exists (select 1 from webhook_attempts a where a.delivery_id = d.id and a.id <> all (array(select id from gone)))`.execute(db);
}
