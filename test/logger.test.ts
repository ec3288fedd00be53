import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const ROOT = path.resolve(import.meta.dirname, "..");

/** Runs `code` (an ES module importing the logger) in a child process and returns its stdout. */
async function stdoutOf(code: string): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], {
    cwd: ROOT,
    timeout: 20_000,
  });
  return stdout;
}

describe("logger", () => {
  it("writes one JSON line per event, and logger.flush(done) calls done once the gathered lines are written", async () => {
    const stdout = await stdoutOf(`
      import { createLogger } from "./src/platform/logger.ts";
      const log = createLogger("info");
      log.info({ event: "first_thing" }, "first");
      log.info({ event: "second_thing" }, "second");
      log.flush((error) => {
        process.stdout.write(error ? "failed\\n" : "flushed\\n");
      });
    `);
    const lines = stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toBe("flushed");
    const events = lines.slice(0, -1).map((line) => JSON.parse(line) as { event: string; level: string; time: string; service: string });
    expect(events.map((e) => [e.event, e.level, e.service])).toEqual([
      ["first_thing", "info", "atrium"],
      ["second_thing", "info", "atrium"],
    ]);
    expect(Number.isNaN(Date.parse(events[0]!.time))).toBe(false);
  });
});
