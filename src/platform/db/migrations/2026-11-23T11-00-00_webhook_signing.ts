import type { Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // How deliveries are signed (X-Webhook-Signature, or Standard Webhooks), and the secret a rotation
  // replaced, which keeps signing beside the new one until it expires.
  await db.schema
    .alterTable("webhooks")
    .addColumn("signature_scheme", "text", (c) => c.notNull().defaultTo("seed"))
    .addColumn("previous_secret", "text")
    .addColumn("previous_secret_expires_at", "timestamptz")
    .execute();
}
