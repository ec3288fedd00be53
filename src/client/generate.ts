import { randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { request as httpRequest } from "undici";
import type { CreateFaceSwapRequest, DeepPartial, FaceSwapAssets } from "../../gen/faceswap/v1/face_swap_service.js";
import type { VideoProject } from "../../gen/faceswap/v1/video_projects_service.js";
import { ApiError, Code } from "./errors.js";
import type { AtriumClient } from "./index.js";

export type { VideoProject };

/** CreateFaceSwap's request, where every *_file_path, new_face and original_face may also be a local path. */
export type FaceSwapGenerateRequest = DeepPartial<CreateFaceSwapRequest>;

export type GenerateProgress =
  | { stage: "upload"; file: string; bytes: number; totalBytes: number }
  | { stage: "queued" | "rendering"; projectId: string; framesRendered: number; framesTotal: number }
  | { stage: "download"; file: string; bytes: number; totalBytes: number | undefined }
  | { stage: "complete"; project: VideoProject };

export interface GenerateOptions {
  /** Poll the project until it is complete, error or canceled; default true. */
  waitForCompletion?: boolean;
  /** Download every output once complete; default true (needs waitForCompletion). */
  downloadOutputs?: boolean;
  /** Created when missing; default the current directory. */
  downloadDirectory?: string;
  onProgress?: (event: GenerateProgress) => void;
  /** Default 500 ms. */
  pollIntervalMs?: number;
  /**
   * Stops the workflow and rejects with the signal's reason. A project that exists and is still
   * queued or rendering is canceled (and refunded) first: nobody is left to collect its output.
   */
  signal?: AbortSignal;
}

export interface GenerateResult {
  /** The project as last read: final when waited for, else as created. */
  project: VideoProject;
  downloadedPaths: string[];
}

export interface DownloadOptions {
  onProgress?: (event: GenerateProgress) => void;
  signal?: AbortSignal;
}

/** The services generate() uses. */
export type GenerateClient = Pick<AtriumClient, "files" | "faceSwap" | "videoProjects">;

/** A local input that cannot be uploaded; nothing was uploaded when this is thrown. */
export class FaceSwapInputError extends Error {
  constructor(
    /** The request field, e.g. assets.video_file_path. */
    readonly field: string,
    readonly file: string,
    /** e.g. "does not exist". */
    readonly reason: string,
  ) {
    super(`${field}: ${file} ${reason}`);
    this.name = "FaceSwapInputError";
  }
}

/** An upload or download that did not go through completely. */
export class TransferError extends Error {
  constructor(
    readonly direction: "upload" | "download",
    readonly url: string,
    /** The HTTP status when the server answered. */
    readonly status: number | undefined,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "TransferError";
  }
}

/** The project ended in `error` (code from project.error) or `canceled` (code `canceled`). */
export class FaceSwapJobError extends Error {
  readonly code: string;

  constructor(readonly project: VideoProject) {
    const canceled = project.status === "canceled";
    super(canceled ? `face swap ${project.id} was canceled` : `face swap ${project.id} failed: ${project.error?.message || "no reason given"}`);
    this.name = "FaceSwapJobError";
    this.code = canceled ? "canceled" : project.error?.code || "unknown_error";
  }
}

const TERMINAL = new Set(["complete", "error", "canceled"]);
const CALL_TIMEOUT_MS = 30_000;
// A poll survives this many consecutive UNAVAILABLE answers (a restarting server) before giving up.
const POLL_RETRIES = 5;

/**
 * Uploads the request's local files, creates the face swap, waits for it and downloads its outputs.
 * Unlike Magic Hour's SDK, values that are already a `file_path` or an http(s) URL are passed
 * through, download failures throw, and an errored or canceled job throws FaceSwapJobError.
 */
export async function generate(
  client: GenerateClient,
  request: FaceSwapGenerateRequest,
  options: GenerateOptions = {},
): Promise<GenerateResult> {
  const { waitForCompletion = true, downloadOutputs = true, pollIntervalMs = 500, signal, onProgress } = options;
  // Set once the project exists and is still open: what an abort has to cancel.
  let open: string | undefined;
  try {
    const uploaded = await uploadLocalFiles(client, request, signal, onProgress);
    const created = await client.faceSwap.createFaceSwap(uploaded, { signal, timeoutMs: CALL_TIMEOUT_MS });
    open = created.id;
    if (!waitForCompletion) return { project: await getProject(client, created.id, signal), downloadedPaths: [] };
    const project = await waitForProject(client, created.id, pollIntervalMs, signal, onProgress);
    open = undefined;
    if (project.status !== "complete") throw new FaceSwapJobError(project);
    const downloadedPaths = downloadOutputs
      ? await downloadProjectOutputs(project, options.downloadDirectory ?? process.cwd(), { onProgress, signal })
      : [];
    onProgress?.({ stage: "complete", project });
    return { project, downloadedPaths };
  } catch (error) {
    if (!signal?.aborted) throw error;
    if (open !== undefined) {
      await client.videoProjects.cancelVideoProject({ id: open }, { timeoutMs: CALL_TIMEOUT_MS }).catch(() => {
        // It finished meanwhile, or the server is gone: nothing left to stop.
      });
    }
    // Calls and transfers cut short by the abort fail in their own ways; the caller should see why it stopped.
    throw signal.reason;
  }
}

/**
 * Downloads each of the project's `downloads` into `directory`, named after the URL's last path
 * segment; each is written under a temporary name and renamed once it is complete.
 */
export async function downloadProjectOutputs(project: VideoProject, directory: string, options: DownloadOptions = {}): Promise<string[]> {
  await fs.mkdir(directory, { recursive: true });
  const paths: string[] = [];
  for (const [i, download] of project.downloads.entries()) {
    const target = path.join(directory, outputName(download.url, `${project.id}-${i}`));
    await downloadFile(download.url, target, options);
    paths.push(target);
  }
  return paths;
}

interface LocalInput {
  field: string;
  file: string;
  type: "video" | "image";
  set: (filePath: string) => void;
}

/** Returns the request with every local path replaced by the `file_path` it was uploaded as. */
async function uploadLocalFiles(
  client: GenerateClient,
  request: FaceSwapGenerateRequest,
  signal: AbortSignal | undefined,
  onProgress: GenerateOptions["onProgress"],
): Promise<FaceSwapGenerateRequest> {
  const source = request.assets ?? {};
  const assets: DeepPartial<FaceSwapAssets> = {
    ...source,
    // A local video can only be meant as a file.
    videoSource: source.videoSource || (source.videoFilePath ? "file" : ""),
    faceMappings: source.faceMappings?.map((m) => ({ ...m })),
  };
  const inputs: LocalInput[] = [];
  const add = (field: string, value: string | undefined, type: LocalInput["type"], set: LocalInput["set"]) => {
    if (value && isLocalPath(value)) inputs.push({ field, file: value, type, set });
  };
  add("assets.video_file_path", assets.videoFilePath, "video", (p) => (assets.videoFilePath = p));
  add("assets.image_file_path", assets.imageFilePath, "image", (p) => (assets.imageFilePath = p));
  for (const [i, mapping] of (assets.faceMappings ?? []).entries()) {
    add(`assets.face_mappings[${i}].original_face`, mapping.originalFace, "image", (p) => (mapping.originalFace = p));
    add(`assets.face_mappings[${i}].new_face`, mapping.newFace, "image", (p) => (mapping.newFace = p));
  }

  // One upload per distinct file, checked before anything is sent.
  const files = new Map<string, { type: LocalInput["type"]; extension: string; size: number; uses: LocalInput[] }>();
  for (const input of inputs) {
    const known = files.get(input.file);
    if (known) {
      known.uses.push(input);
      continue;
    }
    const stat = await fs.stat(input.file).catch(() => undefined);
    if (!stat) throw new FaceSwapInputError(input.field, input.file, "does not exist");
    if (!stat.isFile()) throw new FaceSwapInputError(input.field, input.file, "is not a file");
    const extension = path.extname(input.file).slice(1).toLowerCase();
    if (!extension) throw new FaceSwapInputError(input.field, input.file, "has no file extension (e.g. .mp4, .jpg)");
    files.set(input.file, { type: input.type, extension, size: stat.size, uses: [input] });
  }
  if (files.size > 0) {
    const entries = [...files.entries()];
    const { items } = await client.files
      .createUploadUrls({ items: entries.map(([, f]) => ({ type: f.type, extension: f.extension })) }, { signal, timeoutMs: CALL_TIMEOUT_MS })
      .catch((error: unknown) => {
        // The server names the item (items[0].extension); the caller knows the file by its field.
        const refused = error instanceof ApiError ? error.fieldViolations.find((v) => /^items\[\d+\]\.extension$/.test(v.field)) : undefined;
        const entry = refused && entries[Number(/\d+/.exec(refused.field)![0])];
        if (!refused || !entry) throw error;
        throw new FaceSwapInputError(entry[1].uses[0]!.field, entry[0], `cannot be uploaded as ${entry[1].type === "video" ? "a video" : "an image"}: its extension ${refused.description}`);
      });
    for (const [i, [file, info]] of entries.entries()) {
      const target = items[i]!;
      await uploadFile(file, info.size, target.uploadUrl, signal, onProgress);
      for (const use of info.uses) use.set(target.filePath);
    }
  }
  return { ...request, assets };
}

function isLocalPath(value: string): boolean {
  return !value.startsWith("api-assets/") && !/^https?:\/\//i.test(value);
}

async function uploadFile(
  file: string,
  size: number,
  url: string,
  signal: AbortSignal | undefined,
  onProgress: GenerateOptions["onProgress"],
): Promise<void> {
  const report = reporter((bytes) => onProgress?.({ stage: "upload", file, bytes, totalBytes: size }), size);
  report(0, true);
  const body = createReadStream(file).pipe(counter(report));
  let response;
  try {
    response = await httpRequest(url, { method: "PUT", body, headers: { "content-length": String(size) }, signal });
  } catch (error) {
    body.destroy();
    if (signal?.aborted) throw error;
    throw new TransferError("upload", url, undefined, `uploading ${file} failed: ${(error as Error).message}`, { cause: error });
  }
  const text = await response.body.text();
  if (response.statusCode < 200 || response.statusCode > 299) {
    throw new TransferError("upload", url, response.statusCode, `uploading ${file} failed with HTTP ${response.statusCode}: ${serverMessage(text)}`);
  }
  report(size, true);
}

async function downloadFile(url: string, target: string, options: DownloadOptions): Promise<void> {
  const fail = (status: number | undefined, message: string, cause?: unknown) =>
    new TransferError("download", url, status, `downloading ${path.basename(target)} failed: ${message}`, { cause });
  let response;
  try {
    response = await httpRequest(url, { method: "GET", signal: options.signal });
  } catch (error) {
    if (options.signal?.aborted) throw error;
    throw fail(undefined, (error as Error).message, error);
  }
  if (response.statusCode < 200 || response.statusCode > 299) {
    throw fail(response.statusCode, `HTTP ${response.statusCode}: ${serverMessage(await response.body.text())}`);
  }
  const declared = Number(response.headers["content-length"] ?? Number.NaN);
  const totalBytes = Number.isFinite(declared) ? declared : undefined;
  const report = reporter((bytes) => options.onProgress?.({ stage: "download", file: target, bytes, totalBytes }), totalBytes);
  const temporary = path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(4).toString("hex")}.part`);
  let received = 0;
  try {
    report(0, true);
    await pipeline(
      response.body,
      counter((bytes) => {
        received = bytes;
        report(bytes);
      }),
      createWriteStream(temporary),
      { signal: options.signal },
    );
    if (totalBytes !== undefined && received !== totalBytes) throw fail(response.statusCode, `got ${received} of ${totalBytes} bytes`);
    report(received, true);
    await fs.rename(temporary, target);
  } catch (error) {
    await fs.rm(temporary, { force: true });
    if (error instanceof TransferError || options.signal?.aborted) throw error;
    throw fail(response.statusCode, `after ${received} bytes: ${(error as Error).message}`, error);
  }
}

async function waitForProject(
  client: GenerateClient,
  id: string,
  intervalMs: number,
  signal: AbortSignal | undefined,
  onProgress: GenerateOptions["onProgress"],
): Promise<VideoProject> {
  let last = "";
  for (;;) {
    const project = await getProject(client, id, signal);
    if (TERMINAL.has(project.status)) return project;
    const stage = project.status === "rendering" ? "rendering" : "queued";
    const event = { stage, projectId: id, framesRendered: project.framesRendered, framesTotal: project.framesTotal } as const;
    const key = JSON.stringify(event);
    if (key !== last) onProgress?.(event);
    last = key;
    await sleep(intervalMs, undefined, { signal });
  }
}

async function getProject(client: GenerateClient, id: string, signal: AbortSignal | undefined): Promise<VideoProject> {
  for (let attempt = 1; ; attempt++) {
    try {
      const { project } = await client.videoProjects.getVideoProject({ id }, { signal, timeoutMs: CALL_TIMEOUT_MS });
      return project!;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === Code.UNAVAILABLE) || attempt >= POLL_RETRIES || signal?.aborted) throw error;
      await sleep(1000 * attempt, undefined, { signal });
    }
  }
}

/** Calls `emit` at the start, the end, and about once per percent between (every MiB when the size is unknown). */
function reporter(emit: (bytes: number) => void, totalBytes: number | undefined): (bytes: number, force?: boolean) => void {
  const step = totalBytes === undefined ? 1024 * 1024 : Math.max(1, totalBytes / 100);
  let reported = -1;
  return (bytes, force = false) => {
    if (bytes === reported || (!force && bytes - reported < step)) return;
    reported = bytes;
    emit(bytes);
  };
}

/** A pass-through stream that reports the running byte count. */
function counter(onBytes: (bytes: number) => void): Transform {
  let bytes = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      onBytes(bytes);
      callback(null, chunk);
    },
  });
}

/** The URL path's last segment, unless it could escape the directory or name nothing. */
function outputName(url: string, fallback: string): string {
  const segment = new URL(url).pathname.split("/").at(-1) ?? "";
  let name = "";
  try {
    name = path.basename(decodeURIComponent(segment));
  } catch {
    // Malformed escapes: use the fallback.
  }
  return name === "" || name === "." || name === ".." ? fallback : name;
}

/** The `message` of a JSON error body, else the body itself (shortened). */
function serverMessage(text: string): string {
  try {
    const parsed = JSON.parse(text) as { message?: unknown };
    if (typeof parsed.message === "string") return parsed.message;
  } catch {
    // Not JSON.
  }
  return text.slice(0, 200) || "(empty body)";
}
