export interface TickBatcherOptions<T, R> {
  /**
   * Writes one batch; resolves with one result per item, in the items' order (an empty array when
   * `R` is void). When it rejects, every caller of that batch gets the error.
   */
  write(items: T[]): Promise<R[]>;
  /** Items per call of `write` at most; the rest wait for the next batch. Default: no limit. */
  maxBatch?: number;
  /**
   * Whether a batch may start while an earlier one is still being written. Overlapping batches keep
   * callers from queueing behind a slow statement; without overlap, what arrives meanwhile gathers
   * into the next batch, which starts as soon as the current one ends, so batches grow with the load
   * and one statement runs at a time.
   */
  overlap?: boolean;
  /**
   * Whether batches can be written now; items wait while it says no, until `flush()` is called.
   * Default: always.
   */
  ready?: () => boolean;
}

/** An item, and the caller's promise of its result. */
interface Entry<T, R> extends PromiseWithResolvers<R> {
  item: T;
}

/**
 * Gathers what callers hand in during one tick of the event loop and writes it with one call of
 * `write`, so a burst costs one statement (and one commit) rather than one per caller. Each caller's
 * promise settles with its own item's result.
 */
export class TickBatcher<T, R = void> {
  private readonly queue: Entry<T, R>[] = [];
  private readonly writing = new Set<Promise<void>>();
  private scheduled = false;
  private readonly maxBatch: number;
  private readonly overlap: boolean;
  private readonly ready: () => boolean;

  constructor(private readonly options: TickBatcherOptions<T, R>) {
    this.maxBatch = options.maxBatch ?? Number.POSITIVE_INFINITY;
    this.overlap = options.overlap ?? false;
    this.ready = options.ready ?? (() => true);
  }

  /** Queues the item for this tick's batch; resolves with its result once the batch is written. */
  add(item: T): Promise<R> {
    const { promise, resolve, reject } = Promise.withResolvers<R>();
    this.queue.push({ item, promise, resolve, reject });
    // Without overlap, a write in progress takes what queued meanwhile when it ends: no tick needed.
    if (!this.scheduled && (this.overlap || this.writing.size === 0)) {
      this.scheduled = true;
      setImmediate(() => {
        this.scheduled = false;
        this.flush();
      });
    }
    return promise;
  }

  /** Starts writing what is queued, as far as `overlap` and `ready` allow. */
  flush(): void {
    while (this.queue.length > 0 && (this.overlap || this.writing.size === 0) && this.ready()) {
      const batch = this.queue.splice(0, this.maxBatch);
      const written: Promise<void> = this.write(batch).finally(() => {
        this.writing.delete(written);
        if (!this.overlap) this.flush();
      });
      this.writing.add(written);
    }
  }

  /**
   * Resolves once what is being written and what is queued now has been written (items held back
   * by `ready` aside). Items added meanwhile are not waited for, so a steady stream cannot hold it.
   */
  async idle(): Promise<void> {
    const queued = this.ready() ? this.queue.map((entry) => entry.promise.catch(() => undefined)) : [];
    await Promise.all([...this.writing, ...queued]);
  }

  private async write(batch: Entry<T, R>[]): Promise<void> {
    try {
      const results = await this.options.write(batch.map((entry) => entry.item));
      batch.forEach((entry, i) => entry.resolve(results[i]!));
    } catch (error) {
      for (const entry of batch) entry.reject(error);
    }
  }
}
