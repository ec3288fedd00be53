import { pino, type Logger } from "pino";
import type { LogLevel } from "../config.js";

export type { Logger };

/** One JSON line per event on stdout. */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: "atrium" },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? pino.destination({ sync: false }),
  );
}
