import { sql } from "kysely";
import { creditsReserved } from "../billing/repository.js";
import type { Db } from "../platform/db/database.js";
import type { AccountRow, ApiKeyRow } from "../platform/db/schema.js";

/** An account with the credits its open face swap jobs hold. */
export type AccountView = AccountRow & { credits_reserved: number };

export async function insertAccount(db: Db, name: string, groupIds: string[]): Promise<AccountView> {
  const row = await db.insertInto("accounts").values({ name, group_ids: groupIds }).returningAll().executeTakeFirstOrThrow();
  return { ...row, credits_reserved: 0 };
}

export async function findAccount(db: Db, id: string): Promise<AccountView | undefined> {
  return db.selectFrom("accounts").selectAll().select(creditsReserved).where("id", "=", id).executeTakeFirst();
}

export async function listAccounts(db: Db, offset: number, limit: number): Promise<{ amount: number; rows: AccountView[] }> {
  const [rows, count] = await Promise.all([
    db
      .selectFrom("accounts")
      .selectAll()
      .select(creditsReserved)
      .orderBy("created_at", "desc")
      .orderBy("id")
      .offset(offset)
      .limit(limit)
      .execute(),
    db.selectFrom("accounts").select(sql<number>`count(*)`.as("amount")).executeTakeFirstOrThrow(),
  ]);
  return { amount: count.amount, rows };
}

export interface NewApiKey {
  accountId: string;
  name: string;
  scopes: string[];
  prefix: string;
  keyHash: string;
  expiresAt: Date | null;
}

export async function insertApiKey(db: Db, key: NewApiKey): Promise<ApiKeyRow> {
  return db
    .insertInto("api_keys")
    .values({
      account_id: key.accountId,
      name: key.name,
      scopes: key.scopes,
      prefix: key.prefix,
      key_hash: key.keyHash,
      expires_at: key.expiresAt,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** A key row with its account's groups, which authentication needs. */
export type ApiKeyView = ApiKeyRow & { group_ids: string[] };

export async function findApiKeyByHash(db: Db, keyHash: string): Promise<ApiKeyView | undefined> {
  return db
    .selectFrom("api_keys")
    .innerJoin("accounts", "accounts.id", "api_keys.account_id")
    .selectAll("api_keys")
    .select("accounts.group_ids")
    .where("api_keys.key_hash", "=", keyHash)
    .executeTakeFirst();
}

export async function setApiKeyPrefix(db: Db, id: string, prefix: string): Promise<void> {
  await db.updateTable("api_keys").set({ prefix }).where("id", "=", id).execute();
}

export async function listApiKeys(db: Db, accountId: string | undefined): Promise<ApiKeyRow[]> {
  let query = db.selectFrom("api_keys").selectAll().orderBy("created_at", "desc").orderBy("id");
  if (accountId !== undefined) query = query.where("account_id", "=", accountId);
  return query.execute();
}

/** Sets revoked_at once; revoking again keeps the first time. */
export async function revokeApiKey(db: Db, id: string): Promise<ApiKeyRow | undefined> {
  return db
    .updateTable("api_keys")
    .set({ revoked_at: sql<Date>`coalesce(revoked_at, now())` })
    .where("id", "=", id)
    .returningAll()
    .executeTakeFirst();
}

export async function countApiKeys(db: Db): Promise<number> {
  const row = await db.selectFrom("api_keys").select(sql<number>`count(*)`.as("n")).executeTakeFirstOrThrow();
  return row.n;
}
