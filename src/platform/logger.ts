import { pino, type Logger } from "pino";
import type { LogLevel } from "../config.js";

export type { Logger };

/**
 * Lines wait in memory until this many bytes have gathered, or FLUSH_MS has passed: one write per
 * line was a system call per RPC, a tenth of a cheap call's server CPU. pino flushes what is left
 * when the process exits; a SIGKILL loses at most FLUSH_MS of lines.
 */
const BUFFER_BYTES = 8 * 1024;
const FLUSH_MS = 100;

/** One JSON line per event on stdout. */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: "atrium" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? pino.destination({ sync: false, minLength: BUFFER_BYTES, periodicFlush: FLUSH_MS }),
  );
}
