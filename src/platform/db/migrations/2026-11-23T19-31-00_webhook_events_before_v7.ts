import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Retention finds old events by their version 7 ids; events stored before ids were version 7 have
  // random ones, which that never reaches. This index holds only those, in publishing order, and is
  // empty on a database created since.
  await sql`create index webhook_events_before_v7 on webhook_events (occurred_at, id)
            where substr(id::text, 15, 1) <> '7'`.execute(db);
}
