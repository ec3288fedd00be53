import fs from "node:fs";

/** USER_HZ on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

/** CPU times of a process from /proc/<pid>/stat, in milliseconds; undefined once it has exited. */
export function processCpu(pid: number | string): { ownMs: number; reapedChildrenMs: number } | undefined {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // After the parenthesised command name: state, ppid, ..., utime (14), stime (15), cutime (16), cstime (17).
  const fields = afterName(stat);
  const ms = (a: number, b: number) => ((Number(fields[a]) + Number(fields[b])) * 1000) / CLOCK_TICKS_PER_SECOND;
  return { ownMs: ms(11, 12), reapedChildrenMs: ms(13, 14) };
}

/** The parent's pid of a process, from /proc/<pid>/stat; undefined once it has exited. */
export function parentPid(pid: number | string): string | undefined {
  try {
    return afterName(fs.readFileSync(`/proc/${pid}/stat`, "utf8"))[1];
  } catch {
    return undefined;
  }
}

/** The fields after the parenthesised command name, which may itself hold ") ". */
function afterName(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}
