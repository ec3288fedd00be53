import { randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import { Agent } from "undici";
import { BlobTooLargeError, isBlobKey, type BlobStore } from "../platform/blobs/blob-store.js";
import { invalidArgument } from "../platform/errors.js";
import type { MediaInfo } from "../platform/media/ffmpeg.js";
import type { MediaProbes } from "../platform/media/probes.js";
import { checkUrlSyntax, SsrfBlockedError, type SsrfGuard } from "../platform/ssrf.js";
import { assetPrefix, EXTENSIONS, isHttpUrl } from "./rules.js";

export type SourceKind = "video" | "image" | "any";

export interface Source {
  /** Blob key of the bytes (an upload, or a URL imported at create time). */
  key: string;
  info: MediaInfo;
  /** The bytes were fetched from a URL by this call: the caller deletes them if it refuses the request. */
  imported: boolean;
}

export interface SourceLimits {
  videoBytes: number;
  imageBytes: number;
  /** Bound on fetching one URL: connect, headers and body. */
  fetchTimeoutMs: number;
}

export interface SourceResolverOptions {
  store: BlobStore;
  probes: MediaProbes;
  guard: SsrfGuard;
  limits: SourceLimits;
}

const MAX_REDIRECTS = 5;

/**
 * Turns what a request names (`file_path` or http(s) URL) into a blob key with probed media info,
 * or an INVALID_ARGUMENT naming the field. A URL is fetched once, through the SSRF guard, into the
 * account's assets, so rendering never depends on the remote host again.
 */
export class SourceResolver {
  private readonly agent: Agent;
  private readonly store: BlobStore;
  private readonly probes: MediaProbes;
  private readonly guard: SsrfGuard;
  private readonly limits: SourceLimits;

  constructor({ store, probes, guard, limits }: SourceResolverOptions) {
    this.store = store;
    this.probes = probes;
    this.guard = guard;
    this.limits = limits;
    this.agent = new Agent({ connect: { lookup: guard.connectLookup() } });
  }

  async resolve(field: string, value: string, accountId: string, kind: SourceKind, signal: AbortSignal): Promise<Source> {
    const imported = isHttpUrl(value);
    const key = imported ? await this.importUrl(field, value, accountId, kind, signal) : this.checkPath(field, value, accountId);
    try {
      return { key, info: await this.mediaOf(field, value, key, kind, signal), imported };
    } catch (error) {
      // A refused import is nobody's input: do not keep it in the account's assets.
      if (imported) await this.store.delete([key]).catch(() => undefined);
      throw error;
    }
  }

  private async mediaOf(field: string, value: string, key: string, kind: SourceKind, signal: AbortSignal): Promise<MediaInfo> {
    const probed = await this.probes.of(key, signal);
    if (!probed) throw notUploaded(field, value);
    if (!probed.ok) throw bad(field, `is not a decodable ${kind === "any" ? "video or image" : kind}: ${probed.problem}`);
    const info = probed.info;
    if (kind === "video" && info.still) throw bad(field, "is an image; a video is needed");
    if (kind === "image" && !info.still) throw bad(field, "is a video; an image is needed");
    return info;
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private checkPath(field: string, value: string, accountId: string): string {
    if (!value.startsWith("api-assets/") || !isBlobKey(value)) {
      throw bad(field, "must be a file_path from /v1/files/upload-urls (api-assets/...) or an http(s) URL");
    }
    // Another account's path answers exactly like a missing one: paths are not secrets, but existence is not shared.
    if (!value.startsWith(assetPrefix(accountId))) {
      throw notUploaded(field, value);
    }
    return value;
  }

  private async importUrl(field: string, raw: string, accountId: string, kind: SourceKind, signal: AbortSignal): Promise<string> {
    const timeout = AbortSignal.timeout(this.limits.fetchTimeoutMs);
    const both = AbortSignal.any([signal, timeout]);
    let url = raw;
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      const syntax = checkUrlSyntax(url);
      if ("problem" in syntax) throw bad(field, `is not a valid URL (${syntax.detail})`);
      const blocked = this.guard.checkLiteralHost(syntax.url);
      if (blocked !== undefined) throw bad(field, `may not point to a private address: ${blocked}`);
      let response;
      try {
        response = await this.agent.request({
          origin: syntax.url.origin,
          path: syntax.url.pathname + syntax.url.search,
          method: "GET",
          signal: both,
        });
      } catch (error) {
        if (timeout.aborted) throw bad(field, `could not be fetched within ${this.limits.fetchTimeoutMs} ms`);
        if (signal.aborted) throw error;
        const cause = error instanceof AggregateError ? error.errors[0] : error;
        if (cause instanceof SsrfBlockedError) throw bad(field, `may not point to a private address: ${cause.message}`);
        throw bad(field, `could not be fetched: ${cause instanceof Error ? cause.message : String(cause)}`);
      }
      const location = response.headers.location;
      if (response.statusCode >= 300 && response.statusCode < 400 && typeof location === "string") {
        response.body.resume();
        url = new URL(location, syntax.url).toString();
        continue;
      }
      if (response.statusCode !== 200) {
        response.body.resume();
        throw bad(field, `could not be fetched: the server answered ${response.statusCode}`);
      }
      const maxBytes = kind === "image" ? this.limits.imageBytes : this.limits.videoBytes;
      const key = `${assetPrefix(accountId)}imports/${randomUUID()}.${extensionOf(syntax.url, kind)}`;
      try {
        const { size } = await this.store.put(key, Readable.from(response.body), { maxBytes });
        await this.probes.probe(key, size, signal);
      } catch (error) {
        await this.store.delete([key]).catch(() => undefined);
        if (error instanceof BlobTooLargeError) throw bad(field, `is larger than the limit of ${maxBytes} bytes`);
        if (timeout.aborted) throw bad(field, `could not be fetched within ${this.limits.fetchTimeoutMs} ms`);
        throw error;
      }
      return key;
    }
    throw bad(field, `redirects more than ${MAX_REDIRECTS} times`);
  }
}

function extensionOf(url: URL, kind: SourceKind): string {
  const extension = /\.([a-z0-9]+)$/i.exec(url.pathname)?.[1]?.toLowerCase();
  const known = extension !== undefined && (EXTENSIONS.video.has(extension) || EXTENSIONS.image.has(extension));
  return known ? extension : kind === "image" ? "png" : "mp4";
}

function bad(field: string, description: string) {
  return invalidArgument([{ field, description }], "INVALID_SOURCE");
}

/** A missing file and another account's file answer alike: existence is not shared. */
function notUploaded(field: string, value: string) {
  return bad(field, `no uploaded file "${value}" in this account (upload it to its upload_url first)`);
}
