import { randomUUID } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  paginateListObjectsV2,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { isThrottlingError, isTransientError } from "@smithy/core/retry";
import type { Logger } from "../logger.js";
import { contentTypeOf, isBlobKey, writeCapped, type BlobInfo, type BlobStore, type ByteRange, type LocalCopy } from "./blob-store.js";

export interface S3BlobStoreOptions {
  bucket: string;
  region: string;
  /** For S3-compatible services (MinIO, R2, …); AWS itself when absent. */
  endpoint?: string;
  forcePathStyle: boolean;
  /** Object keys are `<prefix>/<blob key>`, or the blob key itself when "". */
  prefix: string;
  /** Where uploads are spooled and local copies are made. */
  tempDir: string;
  logger: Logger;
}

/** DeleteObjects takes at most this many keys per request. */
const DELETE_BATCH = 1000;

/** Tries of one upload or download, as many as the SDK makes of a request it can send again. */
const TRANSFER_ATTEMPTS = 3;
/** The wait before the second try; it doubles before each later one. */
const TRANSFER_RETRY_MS = 200;

/**
 * Blobs as objects in an S3 bucket (which must exist). Credentials come from the SDK's default chain
 * (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, an instance role).
 */
export class S3BlobStore implements BlobStore {
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly prefix: string;
  private readonly tempDir: string;
  private readonly logger: Logger;

  constructor(options: S3BlobStoreOptions) {
    this.logger = options.logger;
    // Without a logger the SDK and its HTTP handler write their warnings to the console as plain
    // text. The SDK also logs every request (info) and every failed one (error, a missing blob's 404
    // included), which callers see and report as they see fit, so only the warnings come through;
    // not the one about a streamed body it cannot send again, which withRetries sends again itself.
    const sdkLogger = {
      debug: () => {},
      info: () => {},
      warn: (...content: unknown[]) => {
        const message = content.map(String).join(" ");
        if (!message.includes("non-retryable streaming request")) this.logger.warn({ event: "s3_sdk_warning" }, message);
      },
      error: () => {},
    };
    this.client = new S3Client({
      region: options.region,
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      // The SDK's default adds CRC32 checksums to every upload, sent as aws-chunked trailers for
      // streamed bodies, which many S3-compatible services reject or store verbatim.
      requestChecksumCalculation: "WHEN_REQUIRED",
      logger: sdkLogger,
      requestHandler: { logger: sdkLogger },
    });
    this.bucket = options.bucket;
    this.prefix = options.prefix.replace(/^\/+|\/+$/g, "");
    this.tempDir = options.tempDir;
  }

  /**
   * The body is spooled to disk first: the limit must be enforced before anything reaches the
   * bucket, and PutObject needs the length up front to stream in one request.
   */
  async put(key: string, body: Readable, options: { maxBytes: number; contentType?: string }): Promise<BlobInfo> {
    const objectKey = this.objectKeyOf(key);
    await fs.mkdir(this.tempDir, { recursive: true });
    const spool = path.join(this.tempDir, `${randomUUID()}.part`);
    try {
      const size = await writeCapped(body, spool, options.maxBytes);
      await this.upload(objectKey, spool, size, options.contentType ?? contentTypeOf(key));
      return { size };
    } finally {
      await fs.rm(spool, { force: true });
    }
  }

  async putFile(key: string, file: string, contentType: string): Promise<BlobInfo> {
    const objectKey = this.objectKeyOf(key);
    const { size } = await fs.stat(file);
    await this.upload(objectKey, file, size, contentType);
    return { size };
  }

  async stat(key: string): Promise<BlobInfo | undefined> {
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.objectKeyOf(key) }));
      return { size: head.ContentLength ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  async read(key: string, range?: ByteRange): Promise<Readable> {
    const object = await this.client.send(
      new GetObjectCommand({
        Bucket: this.bucket,
        Key: this.objectKeyOf(key),
        Range: range ? `bytes=${range.start}-${range.end}` : undefined,
      }),
    );
    if (!(object.Body instanceof Readable)) throw new Error(`no readable body for blob ${key}`);
    return object.Body;
  }

  /** The copy keeps the blob's file name (in a folder of its own), as tools may go by the extension. */
  async localCopy(key: string): Promise<LocalCopy> {
    await fs.mkdir(this.tempDir, { recursive: true });
    const dir = await fs.mkdtemp(path.join(this.tempDir, "copy-"));
    const release = () => fs.rm(dir, { recursive: true, force: true });
    const file = path.join(dir, key.slice(key.lastIndexOf("/") + 1));
    try {
      // The SDK retries a request until its answer starts; a body cut off after that is fetched again here.
      await this.withRetries("download", key, async () => pipeline(await this.read(key), createWriteStream(file)));
    } catch (error) {
      await release();
      throw error;
    }
    return { path: file, release };
  }

  async delete(keys: string[]): Promise<void> {
    await this.deleteObjects(keys.map((key) => this.objectKeyOf(key)));
  }

  async deletePrefix(prefix: string): Promise<void> {
    const pages = paginateListObjectsV2({ client: this.client }, { Bucket: this.bucket, Prefix: `${this.objectKeyOf(prefix)}/` });
    for await (const page of pages) {
      await this.deleteObjects((page.Contents ?? []).flatMap((object) => (object.Key === undefined ? [] : [object.Key])));
    }
  }

  async presignedDownloadUrl(key: string, expiresInSeconds: number): Promise<string | undefined> {
    const command = new GetObjectCommand({
      Bucket: this.bucket,
      Key: this.objectKeyOf(key),
      ResponseContentDisposition: `attachment; filename="${key.slice(key.lastIndexOf("/") + 1)}"`,
    });
    return getSignedUrl(this.client, command, { expiresIn: expiresInSeconds });
  }

  /**
   * The SDK does not retry a request whose body is a stream, as it cannot send the stream again; a
   * fresh stream of the same file can be, so a dropped connection does not fail a rendered job.
   */
  private async upload(objectKey: string, file: string, size: number, contentType: string): Promise<void> {
    await this.withRetries("upload", objectKey, async () => {
      const body = createReadStream(file);
      try {
        await this.client.send(
          new PutObjectCommand({ Bucket: this.bucket, Key: objectKey, Body: body, ContentLength: size, ContentType: contentType }),
        );
      } finally {
        // A failed request may leave the stream unread, holding its file open.
        body.destroy();
      }
    });
  }

  /** Runs `transfer` up to TRANSFER_ATTEMPTS times while it fails as the SDK's own retries would try again (see isTransient). */
  private async withRetries(what: "upload" | "download", key: string, transfer: () => Promise<void>): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await transfer();
      } catch (error) {
        if (attempt >= TRANSFER_ATTEMPTS || !isTransient(error)) throw error;
        const waitMs = TRANSFER_RETRY_MS * 2 ** (attempt - 1);
        this.logger.warn({ event: `s3_${what}_retry`, key, attempt, wait_ms: waitMs, err: error }, `S3 ${what} failed, trying again`);
        await sleep(waitMs);
      }
    }
  }

  private async deleteObjects(objectKeys: string[]): Promise<void> {
    for (let index = 0; index < objectKeys.length; index += DELETE_BATCH) {
      const batch = objectKeys.slice(index, index + DELETE_BATCH);
      const result = await this.client.send(
        new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }),
      );
      // S3 reports a missing key as deleted; what lands here is a real failure (permissions, throttling).
      const failed = result.Errors ?? [];
      if (failed.length > 0) {
        throw new Error(`could not delete ${failed.length} blob(s), first ${failed[0]?.Key}: ${failed[0]?.Code} ${failed[0]?.Message}`);
      }
    }
  }

  private objectKeyOf(key: string): string {
    if (!isBlobKey(key)) throw new Error(`not a blob key: ${key}`);
    return this.prefix === "" ? key : `${this.prefix}/${key}`;
  }
}

/** Whether the SDK would have tried `error`'s request again: a network failure, a 500, 502, 503 or 504, throttling. */
function isTransient(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const sdkError = error as Parameters<typeof isTransientError>[0];
  return isTransientError(sdkError) || isThrottlingError(sdkError);
}

function isNotFound(error: unknown): boolean {
  return error instanceof S3ServiceException && (error.name === "NotFound" || error.name === "NoSuchKey" || error.$metadata.httpStatusCode === 404);
}
