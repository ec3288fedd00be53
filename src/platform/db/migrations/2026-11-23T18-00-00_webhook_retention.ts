import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Events now leave the database once past their retention, with their deliveries: finding those
  // deliveries (and cascading the delete) looks them up by event.
  await db.schema.createIndex("webhook_deliveries_event").on("webhook_deliveries").column("event_id").execute();
  // A key lives 24 hours and an event at least two days, so a key never outlives its event; the
  // foreign key only made every event deleted scan the keys, which have no index on event_id.
  await sql`alter table webhook_publish_keys drop constraint webhook_publish_keys_event_id_fkey`.execute(db);
}
