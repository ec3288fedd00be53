import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import type { Readable } from "node:stream";
import { isBlobKey, writeCapped, type BlobInfo, type BlobStore, type ByteRange, type LocalCopy } from "./blob-store.js";

/** Blobs as files under one directory (DATA_DIR/blobs by default); writes land by rename, so readers never see half a file. */
export class LocalBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  async put(key: string, body: Readable, options: { maxBytes: number }): Promise<BlobInfo> {
    const file = this.pathOf(key);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const partial = `${file}.${randomUUID()}.part`;
    try {
      const size = await writeCapped(body, partial, options.maxBytes);
      await fs.rename(partial, file);
      return { size };
    } catch (error) {
      await fs.rm(partial, { force: true });
      throw error;
    }
  }

  async putFile(key: string, file: string): Promise<BlobInfo> {
    return this.put(key, createReadStream(file), { maxBytes: Number.MAX_SAFE_INTEGER });
  }

  async stat(key: string): Promise<BlobInfo | undefined> {
    const stats = await fs.stat(this.pathOf(key)).catch(() => undefined);
    return stats?.isFile() ? { size: stats.size } : undefined;
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const stream = createReadStream(this.pathOf(key), range ? { start: range.start, end: range.end } : {});
    await new Promise<void>((resolve, reject) => {
      stream.once("open", () => resolve());
      stream.once("error", reject);
    });
    return stream;
  }

  async localCopy(key: string): Promise<LocalCopy> {
    const file = this.pathOf(key);
    await fs.access(file);
    return { path: file, release: async () => undefined };
  }

  async delete(keys: string[]): Promise<void> {
    await Promise.all(keys.map((key) => fs.rm(this.pathOf(key), { force: true })));
  }

  async deletePrefix(prefix: string): Promise<void> {
    const dir = this.pathOf(prefix);
    const stats = await fs.stat(dir).catch(() => undefined);
    // Only what lies under `prefix/`; a blob named exactly `prefix` is not part of it.
    if (stats?.isDirectory()) await fs.rm(dir, { recursive: true, force: true });
  }

  async presignedDownloadUrl(): Promise<string | undefined> {
    return undefined;
  }

  private pathOf(key: string): string {
    if (!isBlobKey(key)) throw new Error(`not a blob key: ${key}`);
    return path.join(this.root, ...key.split("/"));
  }
}
