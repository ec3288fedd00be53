/** Something the app starts and stops: a connection, a worker, a server. */
export interface Part {
  /** Absent for a part that is running once it exists (an open database). */
  start?(): unknown;
  stop?(): unknown;
}

/**
 * Starts the app's parts in order and stops them in reverse, so the shutdown order is the startup
 * order read backwards and is written down once. Wiring and starting happen inside `open`: if any of
 * it fails, what had started is stopped again before the error reaches the caller.
 */
export class Lifecycle {
  private readonly started: Part[] = [];
  private stopping: Promise<void> | undefined;

  /**
   * Runs `wire` (which builds the parts and starts them here) and returns what it returns. If it
   * throws, the parts started so far are stopped, latest first, and its error is rethrown.
   */
  async open<T>(wire: () => Promise<T>): Promise<T> {
    try {
      return await wire();
    } catch (error) {
      await this.stop().catch(() => undefined);
      throw error;
    }
  }

  /** Starts the parts one after another, after those started before; a part that fails is not stopped. */
  async start(...parts: Part[]): Promise<void> {
    for (const part of parts) {
      await part.start?.();
      this.started.push(part);
    }
  }

  /**
   * Stops the started parts, latest first. A failing stop does not keep the parts before it running:
   * all are stopped, then the first failure is rethrown. Every call gets the same promise.
   */
  stop(): Promise<void> {
    return (this.stopping ??= this.stopAll());
  }

  private async stopAll(): Promise<void> {
    let failure: { error: unknown } | undefined;
    for (const part of [...this.started].reverse()) {
      try {
        await part.stop?.();
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure) throw failure.error;
  }
}
