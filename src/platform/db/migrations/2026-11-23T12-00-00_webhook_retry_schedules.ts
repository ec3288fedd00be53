import type { Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // How long a webhook's deliveries keep being retried: the seed's 1 s, 2 s, 4 s, or about a day.
  await db.schema
    .alterTable("webhooks")
    .addColumn("retry_schedule", "text", (c) => c.notNull().defaultTo("seed"))
    .execute();
}
