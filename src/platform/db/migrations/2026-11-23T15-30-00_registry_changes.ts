import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // One row: the last revision handed out, and the newest one pruned from registry_changes. Taking
  // the next revision locks the row until commit, so revisions commit in order and a reader that
  // sees revision N has seen every change up to N.
  await db.schema
    .createTable("registry_revision")
    .addColumn("id", "boolean", (c) => c.primaryKey().defaultTo(true).check(sql`id`))
    .addColumn("revision", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("pruned_through", "bigint", (c) => c.notNull().defaultTo(0))
    .execute();
  await db.insertInto("registry_revision").values({ id: true }).execute();
  await db.schema
    .createTable("registry_changes")
    .addColumn("revision", "bigint", (c) => c.primaryKey())
    .addColumn("namespace", "text", (c) => c.notNull())
    .addColumn("service", "text", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    // The instance after the change (before it, for a deregistration), as to_jsonb of its row.
    .addColumn("instance", "jsonb", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .createIndex("registry_changes_service")
    .on("registry_changes")
    .columns(["namespace", "service", "revision"])
    .execute();
}
