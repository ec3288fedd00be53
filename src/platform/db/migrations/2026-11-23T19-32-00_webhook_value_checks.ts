import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // The service checks these before it writes; the database holds every writer to the same values,
  // as it does for disabled_reason, so a row the dispatcher reads always has a kind, scheme and
  // schedule it knows how to send.
  await sql`alter table webhooks
    add constraint webhooks_kind_check check (kind in ('generic', 'slack', 'discord', 'telegram', 'magic-hour', 'custom')),
    add constraint webhooks_signature_scheme_check check (signature_scheme in ('seed', 'standard-webhooks')),
    add constraint webhooks_retry_schedule_check check (retry_schedule in ('seed', 'extended'))`.execute(db);
}
