import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { startEmbeddedPostgres } from "../../src/platform/db/embedded-postgres.js";
import { createLogger } from "../../src/platform/logger.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** A PostgreSQL server URL (to its `postgres` database) shared by all test files. */
    postgresUrl: string;
  }
}

/** One PostgreSQL server for the whole run: DATABASE_URL when set, else an embedded throwaway one. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.DATABASE_URL) {
    project.provide("postgresUrl", process.env.DATABASE_URL);
    return async () => {};
  }
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "atrium-test-pg-"));
  // The server may run as the `postgres` user, which must be able to enter the folder.
  await fs.chmod(dir, 0o755);
  const pg = await startEmbeddedPostgres(dir, createLogger("warn"), { durable: false });
  project.provide("postgresUrl", pg.url);
  return async () => {
    await pg.stop();
    await fs.rm(dir, { recursive: true, force: true });
  };
}
