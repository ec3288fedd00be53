import type { BlobStore } from "../platform/blobs/blob-store.js";
import type { Db } from "../platform/db/database.js";
import type { Logger } from "../platform/logger.js";
import type { MediaProbes } from "../platform/media/probes.js";
import { Periodic } from "../platform/periodic.js";
import * as repo from "./repository.js";

const BATCH = 500;

export interface AssetJanitorOptions {
  db: Db;
  store: BlobStore;
  probes: MediaProbes;
  logger: Logger;
  /** How long inputs are kept; 0 keeps them for ever. */
  retentionMs: number;
  /** How often the janitor sweeps. */
  intervalMs: number;
}

/**
 * Deletes inputs kept longer than the retention: uploads and URL imports (photos and videos of
 * people) that no open job still reads, and the face crops of old detections. Rendered outputs stay
 * until their project is deleted. Every replica sweeps; deleting twice is harmless.
 */
export class AssetJanitor {
  private readonly periodic: Periodic;

  private readonly db: Db;
  private readonly store: BlobStore;
  private readonly probes: MediaProbes;
  private readonly logger: Logger;
  private readonly retentionMs: number;
  private readonly intervalMs: number;

  constructor({ db, store, probes, logger, retentionMs, intervalMs }: AssetJanitorOptions) {
    this.db = db;
    this.store = store;
    this.probes = probes;
    this.logger = logger;
    this.retentionMs = retentionMs;
    this.intervalMs = intervalMs;
    this.periodic = new Periodic(() => this.sweep(), logger, "asset_sweep_failed");
  }

  start(): void {
    if (this.retentionMs > 0) this.periodic.start(this.intervalMs);
  }

  async stop(): Promise<void> {
    await this.periodic.stop();
  }

  /** One pass over everything stored before `now` minus the retention; returns how many blobs went. */
  async sweep(now = new Date()): Promise<number> {
    const cutoff = new Date(now.getTime() - this.retentionMs);
    let deleted = 0;
    for (;;) {
      const inputs = await repo.expiredInputs(this.db, cutoff, BATCH);
      const crops = await repo.takeExpiredDetectionCrops(this.db, cutoff, BATCH);
      if (inputs.length === 0 && crops.length === 0) return deleted;
      // Verdicts first: a create must never accept a file whose bytes are gone. A crash in between
      // leaves a blob without a verdict, which is probed (and swept) again if anyone names it.
      await this.probes.forget(inputs);
      await this.store.delete([...inputs, ...crops]);
      deleted += inputs.length + crops.length;
      this.logger.info({ event: "assets_expired", inputs: inputs.length, crops: crops.length }, "expired assets deleted");
    }
  }
}
