import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Every heartbeat moves expires_at. While an index covered it, each heartbeat wrote a new row
  // version into all four of the table's indexes; without one, a heartbeat rewrites the row in
  // place on its page (a heap-only update) and no index changes. The expiry sweeper scans the table
  // instead: at ten thousand instances a millisecond or two per sweep.
  await sql`drop index instances_healthy_expiry`.execute(db);
  // Room on each page for the new row versions heartbeats write, so they stay on the page.
  await sql`alter table instances set (fillfactor = 70)`.execute(db);
}
