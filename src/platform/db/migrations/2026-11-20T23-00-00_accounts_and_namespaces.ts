import { sql, type Kysely } from "kysely";

// Migrations are frozen: they take Kysely<any> because the typed schema moves on after them.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("accounts")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("group_ids", sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable("api_keys")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("account_id", "uuid", (c) => c.notNull().references("accounts.id").onDelete("cascade"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("scopes", sql`text[]`, (c) => c.notNull())
    .addColumn("prefix", "text", (c) => c.notNull())
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("expires_at", "timestamptz")
    .addColumn("revoked_at", "timestamptz")
    .execute();
  await db.schema.createIndex("api_keys_account_id").on("api_keys").column("account_id").execute();

  await db.schema
    .createTable("namespaces")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("name", "varchar(64)", (c) => c.notNull().unique())
    .addColumn("comment", "text")
    .addColumn("owners", "text", (c) => c.notNull())
    .addColumn("token", "text", (c) => c.notNull())
    .addColumn("service_export_to", sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn("metadata", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("sync_to_global_registry", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("created_by", "uuid")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex("namespaces_updated_at").on("namespaces").column("updated_at").execute();

  await db.schema
    .createTable("namespace_grants")
    .addColumn("namespace_id", "uuid", (c) => c.notNull().references("namespaces.id").onDelete("cascade"))
    .addColumn("principal_kind", "text", (c) => c.notNull().check(sql`principal_kind in ('user', 'group')`))
    .addColumn("principal_id", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("namespace_grants_pk", ["namespace_id", "principal_kind", "principal_id"])
    .execute();

  // Services and instances exist from the start so the namespace counts are real queries.
  await db.schema
    .createTable("services")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("namespace_id", "uuid", (c) => c.notNull().references("namespaces.id").onDelete("restrict"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint("services_namespace_name", ["namespace_id", "name"])
    .execute();

  await db.schema
    .createTable("instances")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("service_id", "uuid", (c) => c.notNull().references("services.id").onDelete("cascade"))
    .addColumn("host", "text", (c) => c.notNull())
    .addColumn("port", "integer", (c) => c.notNull())
    .addColumn("healthy", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("isolate", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex("instances_service_id").on("instances").column("service_id").execute();
}
