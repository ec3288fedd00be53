import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // No foreign key to namespaces: the history of a deleted namespace (who deleted it) outlives it.
  // The name is kept beside the id so that an admin can still find it after the row is gone.
  await db.schema
    .createTable("namespace_history")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("namespace_id", "uuid", (c) => c.notNull())
    .addColumn("namespace_name", "text", (c) => c.notNull())
    .addColumn("action", "text", (c) => c.notNull().check(sql`action in ('CREATED', 'UPDATED', 'DELETED', 'TOKEN_ROTATED')`))
    .addColumn("actor", "text", (c) => c.notNull())
    .addColumn("account_id", "text", (c) => c.notNull())
    // [{ field, before?, after? }]; never a token's value.
    .addColumn("changes", "jsonb", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // One index for every read (a live namespace's entries are its name's, filtered by id): each
  // CreateNamespace pays for it, so there is no second one.
  await db.schema.createIndex("namespace_history_by_name").on("namespace_history").columns(["namespace_name", "id"]).execute();
}
