import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Every attempt recorded checked its delivery through this foreign key (a trigger running a lookup
  // and a logged row lock per attempt), and every delivery deleted ran its cascade as a trigger per
  // row, most of the history trim's time. The statements that delete deliveries (the trim, retention,
  // deleting a webhook) delete their attempts themselves.
  await sql`alter table webhook_attempts drop constraint webhook_attempts_delivery_id_fkey`.execute(db);
  // Recover looks only for failed and skipped deliveries here (a delivered one whose final answer was
  // not a 2xx it finds through its failed attempt, by webhook in the history's index). Indexing every
  // delivery by webhook cost an index entry at publish and another at each outcome.
  await sql`drop index webhook_deliveries_webhook`.execute(db);
  await sql`create index webhook_deliveries_unsuccessful on webhook_deliveries (webhook_id, created_at)
            where state in ('failed', 'skipped')`.execute(db);
}
