import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";

const ROOT = path.resolve(import.meta.dirname, "../..");
/** How long a child may take to log "started" (it may create an embedded PostgreSQL first). */
export const STARTUP_MS = 45_000;

/** The real entry point as a child process, with its stdout parsed line by line. */
export class ServiceProcess {
  readonly child: ChildProcess;
  readonly stdoutLines: string[] = [];
  stderr = "";
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private partial = "";
  private readonly waiters = new Set<() => void>();

  constructor(env: Record<string, string>) {
    const inherited = { ...process.env };
    delete inherited.DATABASE_URL;
    delete inherited.NODE_OPTIONS;
    this.child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: ROOT,
      // The renderer's models load with the first job, not at start (few of these processes render).
      env: { ...inherited, RENDER_PRELOAD: "false", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      const parts = (this.partial + chunk).split("\n");
      this.partial = parts.pop()!;
      this.stdoutLines.push(...parts.filter((l) => l.trim() !== ""));
      for (const wake of this.waiters) wake();
    });
    this.child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        if (this.partial.trim() !== "") this.stdoutLines.push(this.partial);
        this.partial = "";
        for (const wake of this.waiters) wake();
        resolve({ code, signal });
      });
    });
  }

  /** Every stdout line parsed; fails the test on a line that is not JSON. */
  get logs(): Record<string, unknown>[] {
    return this.stdoutLines.map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new Error(`stdout line is not JSON: ${line}`);
      }
    });
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Waits for a log line with `event`, failing early if the process exits. */
  async waitForEvent(event: string, timeoutMs = STARTUP_MS): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.logs.find((l) => l.event === event);
      if (found) return found;
      if (!this.running) throw new Error(`exited before "${event}"; stderr: ${this.stderr}; stdout: ${this.stdoutLines.join("\n")}`);
      if (Date.now() > deadline) throw new Error(`no "${event}" within ${timeoutMs} ms; stderr: ${this.stderr}`);
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, 200);
        this.waiters.add(wake);
      });
    }
  }

  /** Sends `signal` (SIGKILL for a crash) and waits for the exit. */
  async kill(signal: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.running) this.child.kill(signal);
    return this.exited;
  }

  /** SIGTERM, then the exit; SIGKILL if it hangs (the test then fails on the exit code). */
  async terminate(timeoutMs = 30_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.running) this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}
