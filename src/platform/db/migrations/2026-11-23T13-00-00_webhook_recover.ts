import type { Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Recovery looks up one webhook's deliveries since a time.
  await db.schema
    .createIndex("webhook_deliveries_webhook")
    .on("webhook_deliveries")
    .columns(["webhook_id", "created_at"])
    .execute();
}
