import type { Logger } from "./logger.js";

/**
 * Runs a background task every `intervalMs`, never two runs at once (a slow run makes the next tick
 * skip); a failure is logged as `failureEvent` and the next tick tries again. The timer never keeps
 * the process alive.
 */
export class Periodic {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly task: () => Promise<unknown>,
    private readonly logger: Logger,
    private readonly failureEvent: string,
  ) {}

  /** Runs the task every `intervalMs`, and at once as well with `now`. */
  start(intervalMs: number, { now = false }: { now?: boolean } = {}): void {
    this.timer = setInterval(() => this.tick(), intervalMs);
    this.timer.unref();
    if (now) this.tick();
  }

  private tick(): void {
    // Through a promise, so that a task that throws at once is caught like one that rejects.
    this.running ??= Promise.resolve()
      .then(() => this.task())
      .then(() => undefined)
      .catch((error: unknown) => this.logger.warn({ event: this.failureEvent, err: error }, "background task failed"))
      .finally(() => (this.running = undefined));
  }

  /** Stops the timer and waits for a run in progress. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
