import { Kysely, PostgresDialect, sql, type RawBuilder } from "kysely";
import { Migrator, type MigrationProvider } from "kysely/migration";
import pg from "pg";
import type { Logger } from "../logger.js";
import { migrations } from "./migrations/index.js";
import type { Database } from "./schema.js";

export type Db = Kysely<Database>;

// int8 (counts) as number: every count this service returns fits in 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

const parseTimestamptzSlowly = pg.types.getTypeParser(pg.types.builtins.TIMESTAMPTZ);
const UTC_TIMESTAMP = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\+00$/;

/**
 * Sessions run in UTC, where PostgreSQL writes `2026-11-20 23:05:48.123456+00`: one step from
 * ISO 8601, which Date.parse reads natively, several times faster than the generic parser (rows of
 * instances carry three timestamps each). Anything else (infinity, BC) takes the generic path.
 */
export function parseTimestamptz(value: string): Date {
  return UTC_TIMESTAMP.test(value) ? new Date(`${value.replace(" ", "T")}:00`) : parseTimestamptzSlowly(value);
}
pg.types.setTypeParser(pg.types.builtins.TIMESTAMPTZ, parseTimestamptz);

export function createDb(url: string, poolSize: number, logger: Logger): Db {
  const pool = new pg.Pool({
    connectionString: url,
    max: poolSize,
    application_name: "atrium",
    options: "-c TimeZone=UTC",
  });
  pool.on("connect", prepareMarkedStatements);
  // An idle connection can be closed by the server at any time (a restart, a failover, or our own
  // shutdown, which pg-pool's end() does not wait for); the pool replaces it. Unhandled, the
  // error would crash the process.
  // Only the message and code: pg attaches the whole client to the error, which would flood the log.
  pool.on("error", (error) =>
    logger.warn(
      { event: "db_idle_connection_error", error: error.message, code: (error as NodeJS.ErrnoException).code },
      "idle connection lost",
    ),
  );
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

/** The comment that opens a statement to be prepared once per connection; see `preparedMark`. */
const PREPARED = /^\/\* prepared: ([a-z_]+) \*\//;

/**
 * Marks a hot statement of fixed text to run as a named prepared statement: each connection parses
 * it once, and PostgreSQL plans it from the cached plan rather than afresh on every call (planning
 * the webhook queue's statements cost about as much as running them). The mark opens the text, and
 * the text must be the same on every call. It works on the pool's connections and on any other
 * client passed to `prepareMarkedStatements`; in Kysely, use `prepared`.
 */
export function preparedMark(name: string): string {
  return `/* prepared: ${name} */`;
}

/** `preparedMark` for Kysely: `sql\`${prepared("name")} select ...\``. */
export function prepared(name: string): RawBuilder<unknown> {
  return sql.raw(preparedMark(name));
}

/**
 * A condition, always true, that lets the statement's own transaction commit without waiting for its
 * WAL to reach the disk (synchronous_commit off for that transaction only). For writes whose loss
 * in a database crash costs only redoing them: a commit otherwise waits for a disk flush, which on
 * the webhook queue's hot statements was most of their time. Put it where the statement surely
 * evaluates it once, as an uncorrelated subquery is (a plan runs it at most once).
 */
export const withoutFlushWait = sql<boolean>`((select set_config('synchronous_commit', 'off', true)) = 'off')`;

/** Kysely sends (text, values); a marked text goes to pg as a named query instead. */
export function prepareMarkedStatements(client: pg.Client): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  client.query = ((text: unknown, ...rest: unknown[]) => {
    const name = typeof text === "string" ? PREPARED.exec(text)?.[1] : undefined;
    return name === undefined ? query(text, ...rest) : query({ name, text, values: rest[0] }, ...rest.slice(1));
  }) as typeof client.query;
}

const provider: MigrationProvider = { getMigrations: async () => migrations };

/** Applies pending migrations; concurrent replicas serialise on Kysely's migration lock. */
export async function migrateToLatest(db: Db, logger: Logger): Promise<void> {
  const migrator = new Migrator({ db, provider });
  const { error, results } = await migrator.migrateToLatest();
  for (const result of results ?? []) {
    const log = result.status === "Error" ? logger.error.bind(logger) : logger.info.bind(logger);
    log({ event: "migration", migration: result.migrationName, status: result.status }, "migration");
  }
  if (error) throw error instanceof Error ? error : new Error(String(error));
}

/** PostgreSQL refused a row whose referenced row is gone (or a delete of a row still referenced). */
export function isForeignKeyViolation(error: unknown): boolean {
  return (error as { code?: string }).code === "23503";
}

/**
 * PostgreSQL refused the values written (a data exception or a broken constraint, SQLSTATE classes 22
 * and 23), as opposed to failing whatever was written (a lost connection, a shutdown).
 */
export function isRefusedData(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (code.startsWith("22") || code.startsWith("23"));
}
