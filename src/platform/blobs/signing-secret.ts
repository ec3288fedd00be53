import { randomBytes } from "node:crypto";
import type { Db } from "../db/database.js";

const NAME = "blob_url_signing";

/**
 * The key of signed blob URLs: every replica must sign and verify with the same one, so the first
 * replica to start stores a random key and the others read it.
 */
export async function sharedSigningSecret(db: Db): Promise<string> {
  await db
    .insertInto("service_secrets")
    .values({ name: NAME, value: randomBytes(32).toString("base64url") })
    .onConflict((oc) => oc.column("name").doNothing())
    .execute();
  const row = await db.selectFrom("service_secrets").select("value").where("name", "=", NAME).executeTakeFirstOrThrow();
  return row.value;
}
