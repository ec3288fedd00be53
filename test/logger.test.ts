import { execFile, spawn } from "node:child_process";
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
  it("writes one JSON line per event, in order, and logger.flush(done) calls done once they are all written", async () => {
    const stdout = await stdoutOf(`
      import { createLogger } from "./src/platform/logger.ts";
      const log = createLogger("info");
      log.info({ event: "first_thing" }, "first");
      // Enough that the file is still being written when flush is called.
      for (let i = 0; i < 5000; i++) log.info({ event: "numbered_thing", i }, "numbered");
      log.info({ event: "last_thing" }, "last");
      log.flush((error) => {
        process.stdout.write(error ? "failed\\n" : "flushed\\n");
      });
    `);
    const lines = stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toBe("flushed");
    const events = lines.slice(0, -1).map((line) => JSON.parse(line) as { event: string; level: string; time: string; service: string; i?: number });
    expect(events).toHaveLength(5002);
    expect([events[0], events[5001]].map((e) => [e!.event, e!.level, e!.service])).toEqual([
      ["first_thing", "info", "atrium"],
      ["last_thing", "info", "atrium"],
    ]);
    expect(events.slice(1, -1).every((e, i) => e.event === "numbered_thing" && e.i === i)).toBe(true);
    expect(Number.isNaN(Date.parse(events[0]!.time))).toBe(false);
  });

  it("calls flush's done with the error once the reader of its output has gone, rather than never", async () => {
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--input-type=module",
        "-e",
        `
        import { createLogger } from "./src/platform/logger.ts";
        const log = createLogger("info");
        for (let i = 0; i < 5000; i++) log.info({ event: "numbered_thing", i }, "numbered");
        log.flush();
        // By now the write has met the closed pipe.
        setTimeout(() => {
          log.info({ event: "after_the_reader_left" }, "after");
          log.flush((error) => process.stderr.write("flushed " + (error?.code ?? "ok") + "\\n"));
        }, 1_000);
        `,
      ],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
    );
    child.stdout.destroy();
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(stderr).toContain("flushed EPIPE");
    expect(code).toBe(0);
  });
});
