import type { BlobStore } from "../blobs/blob-store.js";
import type { Db } from "../db/database.js";
import { MediaError, probeMedia, type MediaInfo } from "./ffmpeg.js";

export type ProbeResult = { ok: true; info: MediaInfo } | { ok: false; problem: string };

/**
 * ffmpeg's verdict on each stored blob, kept in the database: probed once when the blob lands (an
 * upload, a URL import) and read by every request that names it afterwards, on any replica.
 */
export class MediaProbes {
  constructor(
    private readonly db: Db,
    private readonly store: BlobStore,
  ) {}

  /** Probes the blob now and records the verdict (a re-upload under the same key replaces it). */
  async probe(key: string, size: number, signal?: AbortSignal): Promise<ProbeResult> {
    const copy = await this.store.localCopy(key);
    let result: ProbeResult;
    try {
      result = { ok: true, info: await probeMedia(copy.path, signal) };
    } catch (error) {
      if (!(error instanceof MediaError)) throw error;
      result = { ok: false, problem: error.message };
    } finally {
      await copy.release();
    }
    const row = { size, media: result.ok ? JSON.stringify(result.info) : null, problem: result.ok ? null : result.problem };
    await this.db
      .insertInto("media_probes")
      .values({ key, ...row })
      .onConflict((oc) => oc.column("key").doUpdateSet({ ...row, probed_at: new Date() }))
      .execute();
    return result;
  }

  /** Drops the verdicts of deleted blobs. */
  async forget(keys: string[]): Promise<void> {
    if (keys.length > 0) await this.db.deleteFrom("media_probes").where("key", "in", keys).execute();
  }

  /** The recorded verdict, probing first when there is none (a blob stored before probing existed). */
  async of(key: string, signal?: AbortSignal): Promise<ProbeResult | undefined> {
    const row = await this.db.selectFrom("media_probes").select(["media", "problem"]).where("key", "=", key).executeTakeFirst();
    if (row) return row.media ? { ok: true, info: row.media } : { ok: false, problem: row.problem ?? "not decodable" };
    const stat = await this.store.stat(key);
    return stat ? this.probe(key, stat.size, signal) : undefined;
  }
}
