import fs from "node:fs";
import { parentPid, processCpu } from "./proc-stat.js";

/**
 * CPU time, in milliseconds, of the PostgreSQL server listening on `url`'s port: the postmaster,
 * its live children (backends, WAL writer, checkpointer, autovacuum), and the children that already
 * exited (counted in the postmaster's cutime and cstime once reaped). Read from /proc, so Linux only.
 */
export function postgresCpuMs(url: string): () => number {
  const port = new URL(url).port;
  const postmaster = findPostmaster(port);
  return () => {
    let ms = 0;
    for (const pid of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(pid)) continue;
      if (pid === postmaster) {
        const cpu = processCpu(pid);
        ms += cpu ? cpu.ownMs + cpu.reapedChildrenMs : 0;
      } else if (parentPid(pid) === postmaster) ms += processCpu(pid)?.ownMs ?? 0;
    }
    return ms;
  };
}

function findPostmaster(port: string): string {
  for (const pid of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const args = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      const p = args.indexOf("-p");
      if (args[0]?.endsWith("postgres") && p > 0 && args[p + 1] === port) return pid;
    } catch {
      // exited meanwhile
    }
  }
  throw new Error(`no postgres process listening on port ${port}`);
}
