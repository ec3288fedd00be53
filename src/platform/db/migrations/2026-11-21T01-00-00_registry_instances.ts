import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("instances")
    .addColumn("weight", "integer", (c) => c.notNull().defaultTo(100))
    .addColumn("metadata", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("ttl_seconds", "integer", (c) => c.notNull().defaultTo(5))
    .addColumn("last_heartbeat_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    // healthy = a heartbeat arrived within the TTL; kept as a column (flipped by heartbeats and the
    // expiry sweeper) so counts are plain queries and only flips invalidate the namespace cache.
    .addColumn("expires_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now() + interval '5 seconds'`))
    .execute();
  await db.schema
    .alterTable("instances")
    .addUniqueConstraint("instances_service_host_port", ["service_id", "host", "port"])
    .execute();
  await db.schema
    .createIndex("instances_healthy_expiry")
    .on("instances")
    .column("expires_at")
    .where(sql.ref("healthy"), "=", true)
    .execute();
}
