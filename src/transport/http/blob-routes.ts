import type { IncomingMessage, ServerResponse } from "node:http";
import { pipeline } from "node:stream/promises";
import { BlobTooLargeError, contentTypeOf, isBlobKey, type BlobStore, type ByteRange } from "../../platform/blobs/blob-store.js";
import type { UrlSigner } from "../../platform/blobs/signed-urls.js";
import { Code, RpcError } from "../../platform/errors.js";
import type { Logger } from "../../platform/logger.js";
import { writeJson, writeRpcError } from "./responses.js";
import type { HttpRoute } from "./server.js";

const PREFIX = "/blobs/";

export interface BlobRoutesOptions {
  store: BlobStore;
  signer: UrlSigner;
  logger: Logger;
  /** Runs after an upload is stored, before the client hears 200 (the media probe). */
  onUploaded: (key: string, size: number) => Promise<unknown>;
}

/**
 * `/blobs/<key>`: the targets of signed URLs. PUT streams an upload into the blob store (413 past
 * the signed size limit); GET and HEAD serve a blob with range requests. The signature is the only
 * credential, as with presigned S3 URLs.
 */
export function blobRoutes({ store, signer, logger, onUploaded }: BlobRoutesOptions): HttpRoute {
  return async (req, res, target) => {
    if (!target.pathname.startsWith(PREFIX)) return false;
    const key = decodeKey(target.pathname.slice(PREFIX.length));
    if (req.method !== "PUT" && req.method !== "GET" && req.method !== "HEAD") {
      writeRpcError(res, new RpcError(Code.UNIMPLEMENTED, `${req.method} is not supported on blobs`, { reason: "METHOD_NOT_ALLOWED" }), { allow: "GET, HEAD, PUT" }, 405);
      return true;
    }
    const verdict = key === undefined ? undefined : signer.verify(req.method, key, target.searchParams);
    if (key === undefined || !verdict?.ok) {
      const expired = verdict?.ok === false && verdict.problem === "expired";
      const error = new RpcError(
        Code.PERMISSION_DENIED,
        expired ? "this signed URL has expired; request a new one" : "the URL's signature does not match; use the URL exactly as issued",
        { reason: expired ? "URL_EXPIRED" : "BAD_SIGNATURE" },
      );
      drain(req);
      writeRpcError(res, error);
      return true;
    }
    if (req.method === "PUT") await upload(req, res, store, key, verdict.maxBytes, logger, onUploaded);
    else await download(req, res, store, key);
    return true;
  };
}

async function upload(
  req: IncomingMessage,
  res: ServerResponse,
  store: BlobStore,
  key: string,
  maxBytes: number,
  logger: Logger,
  onUploaded: (key: string, size: number) => Promise<unknown>,
): Promise<void> {
  const declared = Number(req.headers["content-length"] ?? Number.NaN);
  if (declared > maxBytes) {
    drain(req);
    writeTooLarge(res, maxBytes);
    return;
  }
  try {
    const { size } = await store.put(key, req, { maxBytes, contentType: contentTypeOf(key) });
    await onUploaded(key, size);
    logger.info({ event: "blob_uploaded", key, size }, "upload stored");
    writeJson(res, 200, { file_path: key, size });
  } catch (error) {
    if (!(error instanceof BlobTooLargeError)) throw error;
    drain(req);
    writeTooLarge(res, maxBytes);
  }
}

async function download(
  req: IncomingMessage,
  res: ServerResponse,
  store: BlobStore,
  key: string,
): Promise<void> {
  const info = await store.stat(key);
  if (!info) {
    writeGone(res);
    return;
  }
  const headers: Record<string, string | number> = {
    "content-type": contentTypeOf(key),
    "accept-ranges": "bytes",
    "content-disposition": `attachment; filename="${key.slice(key.lastIndexOf("/") + 1)}"`,
    "cache-control": "private, max-age=3600",
  };
  // If-Range asks for the range only if the file is the one a validator names; these answers carry no
  // validator, so none matches and the whole file is the answer.
  const requested = req.headers["if-range"] === undefined ? req.headers.range : undefined;
  const range = requested === undefined ? undefined : parseRange(requested, info.size);
  if (range === null) {
    res.writeHead(416, { "content-range": `bytes */${info.size}` });
    res.end();
    return;
  }
  // Opened before the status line goes out, so a blob gone since the stat still gets a clean 404.
  const body =
    req.method === "HEAD" || info.size === 0
      ? undefined
      : await store.read(key, range).catch(async (error: unknown) => ((await store.stat(key)) ? Promise.reject(error) : null));
  if (body === null) {
    writeGone(res);
    return;
  }
  if (range) {
    res.writeHead(206, { ...headers, "content-range": `bytes ${range.start}-${range.end}/${info.size}`, "content-length": range.end - range.start + 1 });
  } else {
    res.writeHead(200, { ...headers, "content-length": info.size });
  }
  if (!body) {
    res.end();
    return;
  }
  await pipeline(body, res).catch(() => res.destroy());
}

/**
 * One `bytes=` range (suffix and open-ended forms included); undefined when the header is not a
 * single valid byte range (`bytes=5-3` is not: serve the whole blob), null when it cannot be
 * satisfied (it starts past the end).
 */
export function parseRange(header: string, size: number): ByteRange | undefined | null {
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0 || size === 0) return null;
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  if (match[2] !== "" && Number(match[2]) < start) return undefined;
  if (start >= size) return null;
  return { start, end: match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1) };
}

function decodeKey(raw: string): string | undefined {
  try {
    const key = raw.split("/").map(decodeURIComponent).join("/");
    return isBlobKey(key) ? key : undefined;
  } catch {
    return undefined;
  }
}

function writeGone(res: ServerResponse): void {
  writeRpcError(res, new RpcError(Code.NOT_FOUND, "this file no longer exists", { reason: "BLOB_NOT_FOUND" }));
}

function writeTooLarge(res: ServerResponse, maxBytes: number): void {
  const error = new RpcError(Code.RESOURCE_EXHAUSTED, `the file is larger than the limit of ${maxBytes} bytes`, {
    reason: "FILE_TOO_LARGE",
    metadata: { max_bytes: String(maxBytes) },
  });
  writeRpcError(res, error, { connection: "close" }, 413);
}

/** Lets a refused request body go without reading it into memory. */
function drain(req: IncomingMessage): void {
  req.resume();
}
