import type { Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // The asset janitor looks for the oldest stored inputs.
  await db.schema.createIndex("media_probes_age").on("media_probes").column("probed_at").execute();
  await db.schema
    .createIndex("faceswap_jobs_finished")
    .on("faceswap_jobs")
    .columns(["type", "finished_at"])
    .execute();
}
