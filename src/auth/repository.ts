import { sql } from "kysely";
import type { Db } from "../platform/db/database.js";
import type { AccountRow, ApiKeyRow, Plan } from "../platform/db/schema.js";

/** An account with the credits its open face swap jobs hold. */
export type AccountView = AccountRow & { credits_reserved: number };

const creditsReserved = sql<number>`(
  select coalesce(sum(j.credits_reserved), 0)::int from faceswap_jobs j
  where j.account_id = accounts.id and j.status in ('queued', 'rendering')
)`.as("credits_reserved");

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

export type ApiKeyWithAccount = ApiKeyRow & { group_ids: string[] };

export async function findApiKeyByHash(db: Db, keyHash: string): Promise<ApiKeyWithAccount | undefined> {
  return db
    .selectFrom("api_keys")
    .innerJoin("accounts", "accounts.id", "api_keys.account_id")
    .selectAll("api_keys")
    .select("accounts.group_ids")
    .where("api_keys.key_hash", "=", keyHash)
    .executeTakeFirst();
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

export async function setPlan(db: Db, id: string, plan: Plan): Promise<boolean> {
  const result = await db.updateTable("accounts").set({ plan }).where("id", "=", id).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Adds `amount` (negative takes away) and records it in the ledger, in the caller's transaction;
 * false when the account does not exist. The balance never goes below zero.
 */
export async function grantCredits(db: Db, id: string, amount: number, reason: string): Promise<boolean> {
  const row = await db
    .updateTable("accounts")
    .set({ credit_balance: sql`greatest(credit_balance + ${amount}, 0)` })
    .where("id", "=", id)
    .returning("id")
    .executeTakeFirst();
  if (!row) return false;
  await db.insertInto("credit_ledger").values({ account_id: id, job_id: null, kind: "grant", amount, reason }).execute();
  return true;
}
