import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PLAN_MAX_LONG_SIDE, PLANS } from "../src/billing/plans.js";
import * as billing from "../src/billing/repository.js";
import { createDb, migrateToLatest, type Db } from "../src/platform/db/database.js";
import type { JobRow } from "../src/platform/db/schema.js";
import { createLogger } from "../src/platform/logger.js";
import { createTestDatabase } from "./support/database.js";

let db: Db;

beforeAll(async () => {
  db = createDb(await createTestDatabase(), 8, createLogger("silent"));
  await migrateToLatest(db, createLogger("silent"));
});
afterAll(async () => {
  await db?.destroy();
});

const UNKNOWN_UUID = "00000000-0000-4000-8000-000000000000";

async function account(credits = 0): Promise<string> {
  const { id } = await db.insertInto("accounts").values({ name: "billing test", group_ids: [] }).returning("id").executeTakeFirstOrThrow();
  if (credits !== 0) await billing.grant(db, id, credits, "test funds");
  return id;
}

async function ledger(accountId: string) {
  return db
    .selectFrom("credit_ledger")
    .select(["job_id", "kind", "amount", "reason"])
    .where("account_id", "=", accountId)
    .orderBy("created_at")
    .orderBy("kind")
    .execute();
}

async function view(accountId: string) {
  return db.selectFrom("accounts").select(["credit_balance", "plan"]).select(billing.creditsReserved).where("id", "=", accountId).executeTakeFirstOrThrow();
}

/** Reserves `credits` for a face swap job whose width records the plan the statement read. */
async function reserveJob(accountId: string, credits: number): Promise<JobRow | undefined> {
  const { rows } = await billing
    .reserve<JobRow>({ accountId, credits, reason: "test job" }, (taken) => sql<JobRow>`
      insert into faceswap_jobs (account_id, type, name, spec, width, credits_reserved, credits_charged)
      select ${accountId}, 'FACE_SWAP', 'test', '{}'::jsonb,
             case ${taken}.plan when 'free' then 1 when 'pro' then 2 else 3 end, ${credits}, ${credits}
      from ${taken}
      returning *`)
    .execute(db);
  return rows[0];
}

describe("plans", () => {
  it("lists every plan with its long-side cap", () => {
    expect(PLANS).toEqual(["free", "pro", "business"]);
    expect(PLAN_MAX_LONG_SIDE).toEqual({ free: 576, pro: 1080, business: 2160 });
  });

  it("setPlan changes an account's plan; false for an unknown account", async () => {
    const id = await account();
    expect((await view(id)).plan).toBe("free");
    expect(await billing.setPlan(db, id, "business")).toBe(true);
    expect((await view(id)).plan).toBe("business");
    expect(await billing.setPlan(db, UNKNOWN_UUID, "pro")).toBe(false);
  });
});

describe("grant", () => {
  it("adds to the balance and records each grant with its reason", async () => {
    const id = await account();
    expect(await billing.grant(db, id, 100, "welcome")).toBe(true);
    expect(await billing.grant(db, id, -30, "correction")).toBe(true);
    expect(await billing.balance(db, id)).toBe(70);
    expect(await ledger(id)).toEqual([
      { job_id: null, kind: "grant", amount: 100, reason: "welcome" },
      { job_id: null, kind: "grant", amount: -30, reason: "correction" },
    ]);
  });

  it("never takes the balance below zero, and records what it took", async () => {
    const id = await account(10);
    await billing.grant(db, id, -25, "take back");
    expect(await billing.balance(db, id)).toBe(0);
    expect((await ledger(id)).at(-1)).toEqual({ job_id: null, kind: "grant", amount: -10, reason: "take back" });
  });

  it("writes nothing for an unknown account", async () => {
    expect(await billing.grant(db, UNKNOWN_UUID, 5, "nobody")).toBe(false);
    expect(await ledger(UNKNOWN_UUID)).toEqual([]);
    expect(await billing.balance(db, UNKNOWN_UUID)).toBe(0);
  });
});

describe("reserve", () => {
  it("takes the credits, creates the job with the account's plan, and records the reservation, in one statement", async () => {
    const id = await account(100);
    await billing.setPlan(db, id, "pro");
    const job = await reserveJob(id, 40);
    expect(job).toMatchObject({ account_id: id, credits_reserved: 40, width: 2, status: "queued" });
    expect(await view(id)).toMatchObject({ credit_balance: 60, credits_reserved: 40 });
    expect((await ledger(id)).at(-1)).toEqual({ job_id: job!.id, kind: "reserve", amount: -40, reason: "test job" });
  });

  it("writes nothing when the balance falls short", async () => {
    const id = await account(10);
    expect(await reserveJob(id, 11)).toBeUndefined();
    expect(await view(id)).toMatchObject({ credit_balance: 10, credits_reserved: 0 });
    expect(await ledger(id)).toHaveLength(1);
    const jobs = await db.selectFrom("faceswap_jobs").select("id").where("account_id", "=", id).execute();
    expect(jobs).toEqual([]);
  });

  it("lets concurrent reservations take only what the balance holds", async () => {
    const id = await account(10);
    const jobs = await Promise.all(Array.from({ length: 6 }, () => reserveJob(id, 3)));
    expect(jobs.filter((job) => job !== undefined)).toHaveLength(3);
    expect(await view(id)).toMatchObject({ credit_balance: 1, credits_reserved: 9 });
    expect((await ledger(id)).filter((entry) => entry.kind === "reserve")).toHaveLength(3);
  });
});

describe("settle and refund", () => {
  async function finish(job: JobRow, status: "complete" | "canceled" | "error", charged: number): Promise<void> {
    await db.updateTable("faceswap_jobs").set({ status, credits_charged: charged }).where("id", "=", job.id).execute();
  }

  it("settle keeps what was charged and gives the rest back", async () => {
    const id = await account(100);
    const job = (await reserveJob(id, 30))!;
    await db.transaction().execute(async (tx) => {
      await finish(job, "complete", 12);
      await billing.settle(tx, job, 12, "rendered 12 frames");
    });
    expect(await view(id)).toMatchObject({ credit_balance: 88, credits_reserved: 0 });
    expect((await ledger(id)).at(-1)).toEqual({ job_id: job.id, kind: "settle", amount: 18, reason: "rendered 12 frames" });
  });

  it("settle records a job that used all it reserved, with nothing to give back", async () => {
    const id = await account(100);
    const job = (await reserveJob(id, 30))!;
    await billing.settle(db, job, 30, "rendered 30 frames");
    expect(await billing.balance(db, id)).toBe(70);
    expect((await ledger(id)).at(-1)).toEqual({ job_id: job.id, kind: "settle", amount: 0, reason: "rendered 30 frames" });
  });

  it("refund gives every reserved credit back", async () => {
    const id = await account(50);
    const job = (await reserveJob(id, 50))!;
    expect(await billing.balance(db, id)).toBe(0);
    await billing.refund(db, job, "canceled");
    expect(await billing.balance(db, id)).toBe(50);
    expect((await ledger(id)).at(-1)).toEqual({ job_id: job.id, kind: "settle", amount: 50, reason: "canceled" });
  });

  it("settles a job once: a second settlement fails and its transaction gives nothing back", async () => {
    const id = await account(100);
    const job = (await reserveJob(id, 40))!;
    await billing.refund(db, job, "canceled");
    const second = db.transaction().execute((tx) => billing.refund(tx, job, "failed: again"));
    await expect(second).rejects.toMatchObject({ code: "23505", constraint: "credit_ledger_once" });
    expect(await billing.balance(db, id)).toBe(100);
    expect((await ledger(id)).filter((entry) => entry.kind === "settle")).toHaveLength(1);
  });
});
