import type { FaceSwapMode, StyleVersion } from "../platform/db/schema.js";

export type UploadType = "video" | "image" | "audio";

/** The extensions each upload type takes (Magic Hour's list). */
export const EXTENSIONS: Record<UploadType, ReadonlySet<string>> = {
  video: new Set(["mp4", "m4v", "mov", "webm", "gif"]),
  image: new Set(["png", "jpg", "jpeg", "heic", "webp", "avif", "jp2", "tiff", "bmp"]),
  audio: new Set(["mp3", "wav", "aac", "flac", "m4a", "webm"]),
};

export const UPLOAD_TYPES = Object.keys(EXTENSIONS) as UploadType[];
export const MAX_UPLOAD_ITEMS = 100;
export const UPLOAD_URL_TTL_MS = 15 * 60 * 1000;
export const DOWNLOAD_URL_TTL_MS = 24 * 60 * 60 * 1000;

/** Credits are quoted at 30 frames per second of clip (Magic Hour's estimate), or more for a faster source. */
export const ESTIMATE_FPS = 30;

/**
 * The credits reserved for a clip: 30 a second, as Magic Hour estimates, or the frames the source
 * holds in the range when it runs faster (a job costs the frames it renders, and a 60 fps source
 * renders 60 a second; quoted at 30, a 1,000 fps clip rendered 1,000 frames for 30 credits).
 */
export function quoteCredits(startSeconds: number, endSeconds: number, fps: number): number {
  // Rounded to the microsecond first, so 0.1 + 0.2 style float noise does not cost a frame; at
  // least one, since even the shortest clip renders a frame.
  const estimate = Math.max(1, Math.ceil(Math.round((endSeconds - startSeconds) * ESTIMATE_FPS * 1e6) / 1e6));
  return Math.max(estimate, expectedFrames(startSeconds, endSeconds, fps));
}

/** Frames the renderer will write for the clip at the source's rate. */
export function expectedFrames(startSeconds: number, endSeconds: number, fps: number): number {
  return Math.max(1, Math.round((endSeconds - startSeconds) * fps));
}

/** The style version `default` resolves to today. */
export const RECOMMENDED_STYLE: StyleVersion = "v2";
/** What a request may name as its style: a version, or `default`. */
export const STYLE_VERSIONS: readonly (StyleVersion | "default")[] = ["v1", "v2", "default"];
export const VIDEO_SOURCES = ["file", "stream", "youtube"] as const;
export const FACE_SWAP_MODES: readonly FaceSwapMode[] = ["all-faces", "individual-faces"];
export const MAX_FACE_MAPPINGS = 20;
export const MAX_NAME_LENGTH = 200;

/** `Face Swap - 2026-11-21 14:03:09` (UTC). */
export function defaultName(now: Date): string {
  return `Face Swap - ${now.toISOString().slice(0, 19).replace("T", " ")}`;
}

/** Where an account's uploads live; a `file_path` outside it is not the caller's. */
export function assetPrefix(accountId: string): string {
  return `api-assets/${accountId}/`;
}

export function outputKey(accountId: string, jobId: string): string {
  return `api-outputs/${accountId}/${jobId}.mp4`;
}

export function isHttpUrl(value: string): boolean {
  return /^https?:\/\//i.test(value);
}
