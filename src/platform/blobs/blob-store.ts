import { createWriteStream } from "node:fs";
import { Transform, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

export interface BlobInfo {
  size: number;
}

export interface ByteRange {
  /** First byte, inclusive. */
  start: number;
  /** Last byte, inclusive. */
  end: number;
}

/** A file on local disk standing for a blob while a job reads it (ffmpeg needs a path). */
export interface LocalCopy {
  path: string;
  /** Removes the copy when it was made for the caller; the local store's own file stays. */
  release(): Promise<void>;
}

/**
 * Where uploads and rendered outputs live. Keys are `/`-separated paths such as
 * `api-assets/<account>/<id>.mp4`. Every method streams; nothing holds a whole file in memory.
 */
export interface BlobStore {
  /** Stores `body` under `key`, refusing with BlobTooLargeError past `maxBytes`. Atomic: a failed put leaves nothing. */
  put(key: string, body: Readable, options: { maxBytes: number; contentType?: string }): Promise<BlobInfo>;
  /** Stores a local file under `key` (rendered outputs). */
  putFile(key: string, file: string, contentType: string): Promise<BlobInfo>;
  stat(key: string): Promise<BlobInfo | undefined>;
  /** The blob's bytes, or the given range of them. */
  read(key: string, range?: ByteRange): Promise<Readable>;
  /** A local path with the blob's bytes. */
  localCopy(key: string): Promise<LocalCopy>;
  /** Deletes the blobs; missing ones are ignored. */
  delete(keys: string[]): Promise<void>;
  /** Deletes every blob whose key starts with `prefix/`. */
  deletePrefix(prefix: string): Promise<void>;
  /**
   * A presigned GET URL from the store itself (S3), or undefined when downloads go through this
   * service's signed /blobs/ route (local directory).
   */
  presignedDownloadUrl(key: string, expiresInSeconds: number): Promise<string | undefined>;
}

export class BlobTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`larger than the limit of ${maxBytes} bytes`);
    this.name = "BlobTooLargeError";
  }
}

/** Streams `body` into a new local file, failing with BlobTooLargeError past `maxBytes`; the bytes written. */
export async function writeCapped(body: Readable, file: string, maxBytes: number): Promise<number> {
  let size = 0;
  const limit = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      size += chunk.length;
      callback(size > maxBytes ? new BlobTooLargeError(maxBytes) : null, chunk);
    },
  });
  await pipeline(body, limit, createWriteStream(file));
  return size;
}

const KEY = /^[A-Za-z0-9_-][A-Za-z0-9._-]*(\/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$/;

/** Keys are relative paths of safe segments (no `..`, no leading dot, no empty segment). */
export function isBlobKey(key: string): boolean {
  return key.length <= 512 && KEY.test(key) && !key.split("/").some((segment) => segment === "." || segment === "..");
}

export function contentTypeOf(key: string): string {
  const extension = key.slice(key.lastIndexOf(".") + 1).toLowerCase();
  return CONTENT_TYPES[extension] ?? "application/octet-stream";
}

const CONTENT_TYPES: Record<string, string> = {
  mp4: "video/mp4",
  m4v: "video/x-m4v",
  mov: "video/quicktime",
  webm: "video/webm",
  gif: "image/gif",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  heic: "image/heic",
  webp: "image/webp",
  avif: "image/avif",
  jp2: "image/jp2",
  tiff: "image/tiff",
  bmp: "image/bmp",
  mp3: "audio/mpeg",
  wav: "audio/wav",
  aac: "audio/aac",
  flac: "audio/flac",
  m4a: "audio/mp4",
};
