import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // An idempotency key of PublishEvent, claimed by the first event published with it. The primary
  // key makes the claim: two publishes with one key, on any replicas, cannot both insert.
  await db.schema
    .createTable("webhook_publish_keys")
    // Like the event's own account_id, not a foreign key: an admin may publish into any account id.
    .addColumn("account_id", "uuid", (c) => c.notNull())
    .addColumn("key", "text", (c) => c.notNull())
    .addColumn("event_id", "uuid", (c) => c.notNull().references("webhook_events.id").onDelete("cascade"))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint("webhook_publish_keys_pkey", ["account_id", "key"])
    .execute();
  await db.schema.createIndex("webhook_publish_keys_created").on("webhook_publish_keys").column("created_at").execute();
}
