import { Writable } from "node:stream";
import type { LogLevel } from "../../src/config.js";
import { createLogger, type Logger } from "../../src/platform/logger.js";

/** A logger whose lines are kept, parsed, in `logs`. */
export function recordingLogger(level: LogLevel): { logger: Logger; logs: Record<string, unknown>[] } {
  const logs: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString("utf8").split("\n")) if (line.trim()) logs.push(JSON.parse(line));
      callback();
    },
  });
  return { logger: createLogger(level, sink), logs };
}
