import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Why and since when a webhook is off, for the people who have to turn it back on. Webhooks
  // already off get no reason: nobody recorded one.
  await db.schema
    .alterTable("webhooks")
    .addColumn("disabled_reason", "text", (c) => c.check(sql`disabled_reason in ('failures', 'gone', 'manual')`))
    .addColumn("disabled_at", "timestamptz")
    .execute();
}
