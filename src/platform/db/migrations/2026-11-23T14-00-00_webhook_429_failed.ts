import { sql, type Kysely } from "kysely";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function up(db: Kysely<any>): Promise<void> {
  // Deliveries whose 429s used up their retries were recorded as delivered; they failed.
  await sql`
    update webhook_deliveries d set state = 'failed'
    where d.state = 'delivered' and d.retries
      and (select a.status from webhook_attempts a where a.delivery_id = d.id order by a.created_at desc limit 1) = 429`.execute(db);
}
