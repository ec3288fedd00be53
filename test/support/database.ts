import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";

/** A new, empty database on the run's server, for one test file; returns its URL. */
export async function createTestDatabase(): Promise<string> {
  const serverUrl = inject("postgresUrl");
  const name = `test_${randomBytes(6).toString("hex")}`;
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}
