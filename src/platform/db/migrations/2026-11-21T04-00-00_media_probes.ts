import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // What ffmpeg found in each stored input, probed once when it lands (upload or URL import), so
  // creating a job reads a row instead of starting ffmpeg. `media` is null for an undecodable file.
  await db.schema
    .createTable("media_probes")
    .addColumn("key", "text", (c) => c.primaryKey())
    .addColumn("size", "bigint", (c) => c.notNull())
    .addColumn("media", "jsonb")
    .addColumn("problem", "text")
    .addColumn("probed_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}
