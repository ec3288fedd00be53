import type { Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // How long a webhook's deliveries keep being retried: the default 1 s, 2 s, 4 s ("seed"), or about a day ("extended").
  await db.schema
    .alterTable("webhooks")
    .addColumn("retry_schedule", "text", (c) => c.notNull().defaultTo("seed"))
    .execute();
}
