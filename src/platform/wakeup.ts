/**
 * Lets background loops sleep until a timer runs out or someone calls `wake()`, whichever comes
 * first. `wake()` cuts short every sleep in progress. A loop that looks for work and then sleeps
 * takes `mark()` before looking: a wake that came after the mark cuts its sleep short too, so a
 * notice arriving between the look and the sleep is not left waiting for the timer.
 */
export class Wakeup {
  private wakes = 0;
  private readonly sleepers = new Set<() => void>();

  wake(): void {
    this.wakes++;
    for (const done of this.sleepers) done();
  }

  /** What to pass to `sleep` so that wakes from now on count. */
  mark(): number {
    return this.wakes;
  }

  /** Sleeps `ms`, less if woken meanwhile, and not at all if woken since `since` (default: now). */
  sleep(ms: number, since = this.wakes): Promise<void> {
    if (ms <= 0 || since !== this.wakes) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }
}
