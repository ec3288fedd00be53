import fs from "node:fs";

/** USER_HZ on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

/**
 * CPU time, in milliseconds, of the PostgreSQL server listening on `url`'s port: the postmaster,
 * its live children (backends, WAL writer, checkpointer, autovacuum), and the children that already
 * exited (counted in the postmaster's cutime and cstime once reaped). Read from /proc, so Linux only.
 */
export function postgresCpuMs(url: string): () => number {
  const port = new URL(url).port;
  const postmaster = findPostmaster(port);
  return () => {
    let ticks = 0;
    for (const pid of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(pid)) continue;
      const fields = statFields(pid);
      if (!fields) continue;
      // After the command name: state, ppid, ..., utime (14), stime (15), cutime (16), cstime (17).
      if (pid === postmaster) ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
      else if (fields[1] === postmaster) ticks += Number(fields[11]) + Number(fields[12]);
    }
    return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
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

function statFields(pid: string): string[] | undefined {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  } catch {
    return undefined;
  }
}
