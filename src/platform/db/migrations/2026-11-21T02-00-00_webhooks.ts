import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("webhooks")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("account_id", "uuid", (c) => c.notNull().references("accounts.id").onDelete("cascade"))
    .addColumn("url", "text", (c) => c.notNull())
    .addColumn("events", sql`text[]`, (c) => c.notNull())
    .addColumn("secret", "text", (c) => c.notNull())
    .addColumn("enabled", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("description", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("last_triggered_at", "timestamptz")
    .addColumn("last_status", "integer")
    .addColumn("failure_count", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema.createIndex("webhooks_account").on("webhooks").columns(["account_id", "created_at"]).execute();

  // The exact body every receiver gets (and whose bytes are signed), kept once per event.
  await db.schema
    .createTable("webhook_events")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("account_id", "uuid", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("body", "text", (c) => c.notNull())
    .addColumn("occurred_at", "timestamptz", (c) => c.notNull())
    .execute();

  // A delivery is a queue row: claimed with FOR UPDATE SKIP LOCKED and a lease (locked_until);
  // a retry is the same row with a later next_attempt_at, so a crash loses nothing.
  await db.schema
    .createTable("webhook_deliveries")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("event_id", "uuid", (c) => c.notNull().references("webhook_events.id").onDelete("cascade"))
    .addColumn("webhook_id", "uuid", (c) => c.notNull().references("webhooks.id").onDelete("cascade"))
    .addColumn("state", "text", (c) =>
      c.notNull().check(sql`state in ('pending', 'delivered', 'failed', 'skipped')`).defaultTo("pending"),
    )
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("retries", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("next_attempt_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("locked_until", "timestamptz")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .createIndex("webhook_deliveries_due")
    .on("webhook_deliveries")
    .column("next_attempt_at")
    .where(sql.ref("state"), "=", "pending")
    .execute();
  await db.schema.createIndex("webhook_deliveries_event").on("webhook_deliveries").column("event_id").execute();

  await db.schema
    .createTable("webhook_attempts")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("delivery_id", "uuid", (c) => c.notNull().references("webhook_deliveries.id").onDelete("cascade"))
    .addColumn("webhook_id", "uuid", (c) => c.notNull().references("webhooks.id").onDelete("cascade"))
    .addColumn("attempt", "integer", (c) => c.notNull())
    .addColumn("status", "integer", (c) => c.notNull())
    .addColumn("success", "boolean", (c) => c.notNull())
    .addColumn("latency_ms", "integer", (c) => c.notNull())
    .addColumn("error", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("response_body", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("next_attempt_at", "timestamptz")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`clock_timestamp()`))
    .execute();
  await db.schema
    .createIndex("webhook_attempts_history")
    .on("webhook_attempts")
    .columns(["webhook_id", "created_at desc"])
    .execute();
  await db.schema.createIndex("webhook_attempts_delivery").on("webhook_attempts").column("delivery_id").execute();
}
