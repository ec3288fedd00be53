import { sql, type RawBuilder } from "kysely";
import type { Db } from "../platform/db/database.js";
import type { Plan } from "../platform/db/schema.js";

// The only writer of balances and plans (accounts.credit_balance, accounts.plan) and of the credit
// ledger. Every change of a balance gets a ledger entry, so a balance can be explained; a job
// reserves once and settles once, which the ledger's unique (job_id, kind) index enforces.

/** The credits an account's open (queued or rendering) jobs hold, as a column of a query on `accounts`. */
export const creditsReserved = sql<number>`(
  select coalesce(sum(j.credits_reserved), 0)::int from faceswap_jobs j
  where j.account_id = accounts.id and j.status in ('queued', 'rendering')
)`.as("credits_reserved");

export async function balance(db: Db, accountId: string): Promise<number> {
  const row = await db.selectFrom("accounts").select("credit_balance").where("id", "=", accountId).executeTakeFirst();
  return row?.credit_balance ?? 0;
}

export async function setPlan(db: Db, accountId: string, plan: Plan): Promise<boolean> {
  const result = await db.updateTable("accounts").set({ plan }).where("id", "=", accountId).executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Adds `amount` (negative takes away) and records it in the ledger, in the caller's transaction;
 * false when the account does not exist. The balance never goes below zero: taking more than it
 * holds takes all of it, and the ledger records what was taken, so its entries still add up to the
 * balance.
 */
export async function grant(db: Db, accountId: string, amount: number, reason: string): Promise<boolean> {
  const row = await db.selectFrom("accounts").select("credit_balance").where("id", "=", accountId).forUpdate().executeTakeFirst();
  if (!row) return false;
  const applied = Math.max(amount, -row.credit_balance);
  await db.updateTable("accounts").set({ credit_balance: sql`credit_balance + ${applied}` }).where("id", "=", accountId).execute();
  await db.insertInto("credit_ledger").values({ account_id: accountId, job_id: null, kind: "grant", amount: applied, reason }).execute();
  return true;
}

/** What a reservation is for: the job's account, its price, and the ledger's reason. */
export interface Reservation {
  accountId: string;
  credits: number;
  reason: string;
}

/**
 * One statement that takes a job's credits from its account, creates the job, and records the
 * reservation against it. `insertJob` gets the relation of the charged account (one row with its
 * `plan`, or none when the balance falls short) and must be an `insert into faceswap_jobs ...
 * select ... from <that relation> returning *` with `credits_reserved` set to the reservation's
 * credits. When the balance falls short nothing is written and the statement returns no row.
 *
 * One statement rather than a transaction of several: the account row stays locked only for that
 * statement's commit, so creates of one account do not queue behind each other's round trips.
 */
export function reserve<Job>(reservation: Reservation, insertJob: (taken: RawBuilder<unknown>) => RawBuilder<Job>): RawBuilder<Job> {
  return sql<Job>`
    with taken as (
      update accounts set credit_balance = credit_balance - ${reservation.credits}
      where id = ${reservation.accountId} and credit_balance >= ${reservation.credits}
      returning plan
    ), job as (${insertJob(sql.table("taken"))}), reserve as (
      insert into credit_ledger (account_id, job_id, kind, amount, reason)
      select account_id, id, 'reserve', -credits_reserved, ${reservation.reason}::text from job
    )
    select * from job`;
}

/** A finished job, as far as its settlement needs it. */
export interface SettledJob {
  id: string;
  account_id: string;
  credits_reserved: number;
}

/**
 * Closes a finished job's reservation, in the caller's transaction (the one that finishes the job):
 * the account keeps `charged` credits and gets the rest back. Once per job: a second settlement of
 * the same job fails on the ledger's unique index and rolls the transaction back.
 */
export async function settle(db: Db, job: SettledJob, charged: number, reason: string): Promise<void> {
  const unused = job.credits_reserved - charged;
  if (unused !== 0) {
    await db
      .updateTable("accounts")
      .set({ credit_balance: sql`credit_balance + ${unused}` })
      .where("id", "=", job.account_id)
      .execute();
  }
  await db
    .insertInto("credit_ledger")
    .values({ account_id: job.account_id, job_id: job.id, kind: "settle", amount: unused, reason })
    .execute();
}

/** Settles a job that delivered nothing (canceled or failed): every reserved credit goes back. */
export async function refund(db: Db, job: SettledJob, reason: string): Promise<void> {
  await settle(db, job, 0, reason);
}
