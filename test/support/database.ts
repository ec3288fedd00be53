import { randomBytes } from "node:crypto";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import { inject } from "vitest";
import type { Db } from "../../src/platform/db/database.js";
import type { Database } from "../../src/platform/db/schema.js";

/** A new, empty database on the run's server, for one test file; returns its URL. */
export async function createTestDatabase(): Promise<string> {
  const serverUrl = inject("postgresUrl");
  const name = `test_${randomBytes(6).toString("hex")}`;
  await query(serverUrl, `CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * One statement on a connection of its own, outside every app: a write no replica announces (as a
 * writer that died between its commit and its notice leaves it), or a read past the app. Returns the rows.
 */
export async function query(databaseUrl: string, text: string, values: unknown[] = []): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * A database handle of its own on `databaseUrl` that keeps the text of every statement it runs, and
 * its parameters, for tests that count what a piece of the service asks the database; destroy it
 * when done.
 */
export function recordingDb(
  databaseUrl: string,
  poolSize: number,
): { db: Db; statements: string[]; parameters: (readonly unknown[])[] } {
  const statements: string[] = [];
  const parameters: (readonly unknown[])[] = [];
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: databaseUrl, max: poolSize }) }),
    log: (event) => {
      statements.push(event.query.sql);
      parameters.push(event.query.parameters);
    },
  });
  return { db, statements, parameters };
}
