import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("accounts")
    .addColumn("plan", "text", (c) => c.notNull().defaultTo("free").check(sql`plan in ('free', 'pro', 'business')`))
    .addColumn("credit_balance", "bigint", (c) => c.notNull().defaultTo(0).check(sql`credit_balance >= 0`))
    .execute();

  // Face swap and face detection jobs. A job is its own queue row: claimed with FOR UPDATE SKIP LOCKED
  // and a lease (locked_until) that the rendering worker extends, so a crashed worker's job is claimed
  // again when the lease runs out.
  await db.schema
    .createTable("faceswap_jobs")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("account_id", "uuid", (c) => c.notNull().references("accounts.id").onDelete("cascade"))
    .addColumn("type", "text", (c) => c.notNull().check(sql`type in ('FACE_SWAP', 'FACE_DETECTION')`))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) =>
      c.notNull().defaultTo("queued").check(sql`status in ('queued', 'rendering', 'complete', 'error', 'canceled')`),
    )
    // The validated inputs: blob keys or URLs, mode, style, mappings, confidence.
    .addColumn("spec", "jsonb", (c) => c.notNull())
    .addColumn("start_seconds", "double precision", (c) => c.notNull().defaultTo(0))
    .addColumn("end_seconds", "double precision", (c) => c.notNull().defaultTo(0))
    .addColumn("width", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("height", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("fps", "double precision", (c) => c.notNull().defaultTo(0))
    .addColumn("has_audio", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("frames_total", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("frames_rendered", "integer", (c) => c.notNull().defaultTo(0))
    // What the queueing transaction took from the balance, and what the job costs in the end.
    .addColumn("credits_reserved", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("credits_charged", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("error_code", "text")
    .addColumn("error_message", "text")
    .addColumn("enabled", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("locked_by", "text")
    .addColumn("locked_until", "timestamptz")
    .addColumn("output_keys", sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'`))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("started_at", "timestamptz")
    .addColumn("finished_at", "timestamptz")
    .execute();
  await db.schema
    .createIndex("faceswap_jobs_account")
    .on("faceswap_jobs")
    .columns(["account_id", "type", "created_at desc", "id desc"])
    .execute();
  await db.schema
    .createIndex("faceswap_jobs_open")
    .on("faceswap_jobs")
    .columns(["created_at"])
    .where(sql.ref("status"), "in", ["queued", "rendering"])
    .execute();

  // Every change of a balance, so a balance can be explained; a job reserves once and settles once.
  await db.schema
    .createTable("credit_ledger")
    .addColumn("id", "uuid", (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn("account_id", "uuid", (c) => c.notNull().references("accounts.id").onDelete("cascade"))
    .addColumn("job_id", "uuid", (c) => c.references("faceswap_jobs.id").onDelete("set null"))
    .addColumn("kind", "text", (c) => c.notNull().check(sql`kind in ('grant', 'reserve', 'settle')`))
    .addColumn("amount", "bigint", (c) => c.notNull())
    .addColumn("reason", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex("credit_ledger_account").on("credit_ledger").columns(["account_id", "created_at"]).execute();
  await db.schema
    .createIndex("credit_ledger_once")
    .on("credit_ledger")
    .columns(["job_id", "kind"])
    .unique()
    .where(sql.ref("job_id"), "is not", null)
    .execute();

  // Secrets every replica must share (the blob URL signing key when none is configured).
  await db.schema
    .createTable("service_secrets")
    .addColumn("name", "text", (c) => c.primaryKey())
    .addColumn("value", "text", (c) => c.notNull())
    .execute();
}
