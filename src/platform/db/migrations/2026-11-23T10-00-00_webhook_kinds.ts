import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // The payload format of each webhook and what that format needs (a Telegram chat, a template).
  // Existing webhooks keep the format they had: kind generic, no settings.
  await db.schema
    .alterTable("webhooks")
    .addColumn("kind", "text", (c) => c.notNull().defaultTo("generic"))
    .addColumn("settings", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .execute();
}
