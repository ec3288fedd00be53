import { pino, type DestinationStream, type Logger } from "pino";
import type { LogLevel } from "../config.js";

export type { Logger };

/**
 * Lines wait in memory until this many bytes have gathered, or FLUSH_MS has passed: one write per
 * line was a system call per RPC, a tenth of a cheap call's server CPU, and a write of 8 KiB still
 * cost about 0.9 µs of CPU per line against 0.3 µs for 64 KiB. What is left is written when the
 * process exits; a SIGKILL loses at most FLUSH_MS of lines.
 */
const BUFFER_BYTES = 64 * 1024;
const FLUSH_MS = 100;

/** One JSON line per event on stdout. */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { service: "atrium" },
      timestamp: isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? new LineBatcher(pino.destination({ sync: false })),
  );
}

let lastMs = 0;
let lastTime = "";

/**
 * pino's isoTime, formatted once per millisecond: under load a dozen lines share each one, and
 * toISOString was 2 % of a cheap call's server CPU.
 */
function isoTime(): string {
  const now = Date.now();
  if (now !== lastMs) {
    lastMs = now;
    lastTime = `,"time":"${new Date(now).toISOString()}"`;
  }
  return lastTime;
}

const batchers = new Set<LineBatcher>();
process.once("exit", () => {
  for (const batcher of batchers) batcher.flushSync();
});

/**
 * Gathers lines as an array and hands them to the file in one piece. sonic-boom (pino's
 * destination) keeps its own buffer as one string and measures it again for every line appended,
 * which cost about 2 µs of the 4 µs a line took; it still does the writing here (partial writes,
 * a full pipe) and the last flush at exit.
 */
class LineBatcher implements DestinationStream {
  private lines: string[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The file still has lines of ours to write (sonic-boom says "drain" once it has none). */
  private writing = false;
  private waiting: ((error?: Error) => void)[] = [];
  /** A reader that went away (EPIPE): pino drops every later line, and no "drain" comes again. */
  private broken: Error | undefined;

  constructor(private readonly out: ReturnType<typeof pino.destination>) {
    batchers.add(this);
    out.on("drain", () => this.settle());
    out.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code === "EPIPE") this.broken = error;
      this.settle(error);
      // pino hands any other error on once it is the only listener left; with this one listening it
      // would be swallowed, and a full disk would grow sonic-boom's buffer without end. It ends the
      // process, as it did before anything here listened.
      if (error.code !== "EPIPE" && out.listenerCount("error") === 1) throw error;
    });
  }

  write(line: string): void {
    this.lines.push(line);
    // Characters, not bytes: close enough to decide when to write.
    this.bytes += line.length;
    if (this.bytes >= BUFFER_BYTES) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), FLUSH_MS).unref();
  }

  /**
   * Hands the lines gathered to the file; pino's `logger.flush(done)` comes here, and `done` is called
   * once they are written (sonic-boom's own flush calls back at once while a write is under way).
   */
  flush(done?: (error?: Error) => void): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.lines.length > 0) {
      this.out.write(this.lines.join(""));
      this.writing = !this.broken;
      this.lines = [];
      this.bytes = 0;
    }
    if (!done) return;
    if (this.broken) done(this.broken);
    else if (this.writing) this.waiting.push(done);
    else done();
  }

  private settle(error?: Error): void {
    this.writing = false;
    const waiting = this.waiting;
    this.waiting = [];
    for (const done of waiting) done(error);
  }

  flushSync(): void {
    this.flush();
    try {
      this.out.flushSync();
    } catch {
      // Exiting: a stdout that cannot take more loses its last lines, as a SIGKILL would.
    }
  }
}
