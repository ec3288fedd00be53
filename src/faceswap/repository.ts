import { sql } from "kysely";
import * as billing from "../billing/repository.js";
import type { Db } from "../platform/db/database.js";
import type { JobRow, JobSpec, JobStatus, JobType, Plan } from "../platform/db/schema.js";

export interface NewJob {
  accountId: string;
  type: JobType;
  name: string;
  spec: JobSpec;
  startSeconds: number;
  endSeconds: number;
  width: number;
  height: number;
  fps: number;
  hasAudio: boolean;
  framesTotal: number;
  credits: number;
}

/**
 * Queues the job taking its credits from the account, in one statement (see billing's reserve). The
 * output size is picked by the plan the statement reads. Undefined when the balance falls short
 * (nothing is written).
 */
export async function queueJobTakingCredits(
  db: Db,
  job: Omit<NewJob, "width" | "height"> & { sizes: Record<Plan, { width: number; height: number }> },
): Promise<JobRow | undefined> {
  const reservation = { accountId: job.accountId, credits: job.credits, reason: "face swap queued" };
  const { rows } = await billing
    .reserve<JobRow>(reservation, (taken) => {
      const size = (side: "width" | "height") =>
        sql`case ${taken}.plan when 'free' then ${job.sizes.free[side]}::int when 'pro' then ${job.sizes.pro[side]}::int else ${job.sizes.business[side]}::int end`;
      return sql<JobRow>`
        insert into faceswap_jobs (account_id, type, name, spec, start_seconds, end_seconds, width, height, fps,
                                   has_audio, frames_total, credits_reserved, credits_charged)
        select ${job.accountId}, ${job.type}, ${job.name}, ${JSON.stringify(job.spec)}::jsonb, ${job.startSeconds}, ${job.endSeconds},
               ${size("width")}, ${size("height")}, ${job.fps}, ${job.hasAudio}, ${job.framesTotal}, ${job.credits}, ${job.credits}
        from ${taken}
        returning *`;
    })
    .execute(db);
  return rows[0];
}

export async function insertJob(db: Db, job: NewJob): Promise<JobRow> {
  return db
    .insertInto("faceswap_jobs")
    .values({
      account_id: job.accountId,
      type: job.type,
      name: job.name,
      spec: JSON.stringify(job.spec),
      start_seconds: job.startSeconds,
      end_seconds: job.endSeconds,
      width: job.width,
      height: job.height,
      fps: job.fps,
      has_audio: job.hasAudio,
      frames_total: job.framesTotal,
      credits_reserved: job.credits,
      credits_charged: job.credits,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function findJob(db: Db, accountId: string, type: JobType, id: string): Promise<JobRow | undefined> {
  return db
    .selectFrom("faceswap_jobs")
    .selectAll()
    .where("id", "=", id)
    .where("account_id", "=", accountId)
    .where("type", "=", type)
    .executeTakeFirst();
}

/** Where a page ended: created_at in microseconds since the epoch (a Date keeps only milliseconds) and the id. */
export interface JobCursor {
  createdUs: number;
  id: string;
}

/** Newest first, keyset-paged on (created_at, id); each row carries its own cursor. */
export async function listJobs(
  db: Db,
  accountId: string,
  type: JobType,
  after: JobCursor | undefined,
  limit: number,
): Promise<(JobRow & { created_us: number })[]> {
  let query = db
    .selectFrom("faceswap_jobs")
    .selectAll()
    .select(sql<number>`(extract(epoch from created_at) * 1000000)::bigint`.as("created_us"))
    .where("account_id", "=", accountId)
    .where("type", "=", type)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(limit);
  if (after) {
    query = query.where(({ eb, refTuple, tuple }) =>
      eb(refTuple("created_at", "id"), "<", tuple(sql<Date>`timestamptz 'epoch' + ${after.createdUs} * interval '1 microsecond'`, after.id)),
    );
  }
  return query.execute();
}

/**
 * Claims the oldest queued job, or a rendering one whose worker's lease ran out, for `leaseMs`.
 * SKIP LOCKED lets every replica's workers claim at once without waiting on each other.
 */
export async function claimJob(db: Db, workerId: string, leaseMs: number): Promise<JobRow | undefined> {
  const { rows } = await sql<JobRow>`
    with next as (
      select id from faceswap_jobs
      where status = 'queued' or (status = 'rendering' and locked_until < now())
      order by created_at
      limit 1
      for update skip locked
    )
    update faceswap_jobs j
    set status = 'rendering', attempts = j.attempts + 1, locked_by = ${workerId},
        locked_until = now() + ${leaseMs} * interval '1 millisecond', started_at = coalesce(j.started_at, now())
    from next
    where j.id = next.id
    returning j.*`.execute(db);
  return rows[0];
}

/** Extends the lease and records progress; false when the job is no longer this worker's (canceled, or re-claimed). */
export async function renewLease(
  db: Db,
  id: string,
  workerId: string,
  leaseMs: number,
  framesRendered: number,
): Promise<boolean> {
  const row = await db
    .updateTable("faceswap_jobs")
    .set({
      locked_until: sql`now() + ${leaseMs} * interval '1 millisecond'`,
      frames_rendered: framesRendered,
    })
    .where("id", "=", id)
    .where("locked_by", "=", workerId)
    .where("status", "=", "rendering")
    .returning("id")
    .executeTakeFirst();
  return row !== undefined;
}

export interface Outcome {
  status: Extract<JobStatus, "complete" | "error" | "canceled">;
  framesRendered: number;
  creditsCharged: number;
  errorCode?: string;
  errorMessage?: string;
  outputKeys?: string[];
}

/**
 * Moves an open job to its final status, once: only the first of a worker's finish, a cancel and a
 * lease-expiry verdict matches `status in (queued, rendering)`. With `workerId`, only that worker's
 * claim may finish it. Returns the finished row, or undefined when someone else already did.
 */
export async function finishJob(db: Db, id: string, outcome: Outcome, workerId?: string): Promise<JobRow | undefined> {
  let query = db
    .updateTable("faceswap_jobs")
    .set({
      status: outcome.status,
      frames_rendered: outcome.framesRendered,
      credits_charged: outcome.creditsCharged,
      error_code: outcome.errorCode ?? null,
      error_message: outcome.errorMessage ?? null,
      output_keys: outcome.outputKeys ?? [],
      locked_by: null,
      locked_until: null,
      finished_at: sql`now()`,
    })
    .where("id", "=", id)
    .where("status", "in", ["queued", "rendering"]);
  if (workerId !== undefined) query = query.where("locked_by", "=", workerId);
  return query.returningAll().executeTakeFirst();
}

/** Marks a finished job deleted; returns the output keys to remove, or undefined if it does not exist. */
export async function disableJob(db: Db, accountId: string, id: string): Promise<string[] | undefined> {
  const before = await db
    .selectFrom("faceswap_jobs")
    .select("output_keys")
    .where("id", "=", id)
    .where("account_id", "=", accountId)
    .where("type", "=", "FACE_SWAP")
    .forUpdate()
    .executeTakeFirst();
  if (!before) return undefined;
  await db.updateTable("faceswap_jobs").set({ enabled: false, output_keys: [] }).where("id", "=", id).execute();
  return before.output_keys;
}

/** Hands a claimed job back to the queue at once (this replica is shutting down). */
export async function releaseJob(db: Db, id: string, workerId: string): Promise<void> {
  await db
    .updateTable("faceswap_jobs")
    .set({ status: "queued", locked_by: null, locked_until: null, attempts: sql`greatest(attempts - 1, 0)` })
    .where("id", "=", id)
    .where("locked_by", "=", workerId)
    .where("status", "=", "rendering")
    .execute();
}

/** Open jobs per status; the partial index faceswap_jobs_open holds exactly these rows. */
export async function countOpenJobs(db: Db): Promise<{ status: JobStatus; count: number }[]> {
  return db
    .selectFrom("faceswap_jobs")
    .select(["status", (eb) => eb.fn.countAll<string>().as("count")])
    .where("status", "in", ["queued", "rendering"])
    .groupBy("status")
    .execute()
    .then((rows) => rows.map((r) => ({ status: r.status, count: Number(r.count) })));
}

/**
 * Inputs (uploads, URL imports) stored before `cutoff` that no queued or rendering job names: what
 * the asset janitor may delete. A job's spec holds the keys it reads.
 */
export async function expiredInputs(db: Db, cutoff: Date, limit: number): Promise<string[]> {
  const { rows } = await sql<{ key: string }>`
    select p.key from media_probes p
    where p.probed_at < ${cutoff} and p.key like 'api-assets/%'
      and not exists (
        select 1 from faceswap_jobs j
        where j.status in ('queued', 'rendering') and strpos(j.spec::text, p.key) > 0
      )
    order by p.probed_at
    limit ${limit}`.execute(db);
  return rows.map((row) => row.key);
}

/** Takes the face crops of detections finished before `cutoff` off their jobs; returns the crops' keys. */
export async function takeExpiredDetectionCrops(db: Db, cutoff: Date, limit: number): Promise<string[]> {
  const { rows } = await sql<{ keys: string[] }>`
    with old as (
      select id, output_keys from faceswap_jobs
      where type = 'FACE_DETECTION' and finished_at < ${cutoff} and output_keys <> '{}'
      order by finished_at
      limit ${limit}
      for update skip locked
    )
    update faceswap_jobs j set output_keys = '{}'
    from old
    where j.id = old.id
    returning old.output_keys as keys`.execute(db);
  return rows.flatMap((row) => row.keys);
}
