import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Time-ordered ids: every new event, delivery and attempt lands at the right edge of its primary
  // key instead of on a random leaf page, so a busy queue dirties (and logs to the WAL) a few hot
  // pages rather than about one page per row.
  await sql`alter table webhook_events alter column id set default uuidv7()`.execute(db);
  await sql`alter table webhook_deliveries alter column id set default uuidv7()`.execute(db);
  await sql`alter table webhook_attempts alter column id set default uuidv7()`.execute(db);
  // Room on each page, so that a claim, which rewrites only the lease and the attempt count, is a
  // heap-only update that leaves the indexes alone.
  await sql`alter table webhook_deliveries set (fillfactor = 70)`.execute(db);
  // No statement looks deliveries up by event, and events are never deleted (the only use the
  // index had: cascading a delete). Every delivery written, and rewritten on its outcome, paid for it.
  await sql`drop index webhook_deliveries_event`.execute(db);
  // An attempt's delivery already belongs to the webhook, and deleting the webhook removes its
  // attempts through their deliveries. The second foreign key only made every recorded attempt lock
  // the webhook's row, which the same statement then updates.
  await sql`alter table webhook_attempts drop constraint webhook_attempts_webhook_id_fkey`.execute(db);
  // Delivered deliveries used to stay after their attempts left the history; the dispatcher now
  // drops them as it trims the history. These are the ones it would have dropped so far.
  await sql`
    delete from webhook_deliveries d
    where d.state = 'delivered' and not exists (select 1 from webhook_attempts a where a.delivery_id = d.id)`.execute(db);
}
