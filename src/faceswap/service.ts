import { randomUUID } from "node:crypto";
import type { CreateFaceDetectionRequest } from "../../gen/faceswap/v1/face_detection_service.js";
import type { CreateFaceSwapRequest } from "../../gen/faceswap/v1/face_swap_service.js";
import type { UploadItem } from "../../gen/faceswap/v1/files_service.js";
import { PLAN_MAX_LONG_SIDE } from "../billing/plans.js";
import * as billing from "../billing/repository.js";
import type { Principal } from "../platform/auth.js";
import type { BlobStore } from "../platform/blobs/blob-store.js";
import type { UrlSigner } from "../platform/blobs/signed-urls.js";
import { JOBS_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { FaceSwapMode, JobRow, JobSpec, StyleVersion } from "../platform/db/schema.js";
import { Code, failedPrecondition, invalidArgument, notFound, oneOf, RpcError, Violations } from "../platform/errors.js";
import { isUuid } from "../platform/ids.js";
import { outputSize } from "../platform/media/ffmpeg.js";
import { keysetPage, keysetResult } from "../platform/paging.js";
import type { EventSink } from "./events.js";
import type { JobMetrics } from "./metrics.js";
import * as repo from "./repository.js";
import {
  assetPrefix,
  defaultName,
  DOWNLOAD_URL_TTL_MS,
  quoteCredits,
  expectedFrames,
  EXTENSIONS,
  FACE_SWAP_MODES,
  MAX_FACE_MAPPINGS,
  MAX_NAME_LENGTH,
  MAX_UPLOAD_ITEMS,
  RECOMMENDED_STYLE,
  STYLE_VERSIONS,
  UPLOAD_TYPES,
  UPLOAD_URL_TTL_MS,
  VIDEO_SOURCES,
  type UploadType,
} from "./rules.js";
import type { SourceResolver } from "./sources.js";

export interface UploadLimits {
  videoBytes: number;
  imageBytes: number;
  audioBytes: number;
}

export interface SignedLink {
  url: string;
  expiresAt: Date;
}

export interface CreatedJob {
  id: string;
  credits: number;
  /** Set when the request used deprecated fields. */
  deprecationWarning?: string;
}

const PROJECT_PAGES = { defaultSize: 20, maxSize: 100 };
const DEFAULT_CONFIDENCE = 0.5;

export interface FaceSwapServiceOptions {
  db: Db;
  store: BlobStore;
  signer: UrlSigner;
  sources: SourceResolver;
  notifications: Notifications;
  events: EventSink;
  uploadLimits: UploadLimits;
  metrics: JobMetrics;
}

/** The face swap rules: uploads, job creation with credit reservation, and the account's projects. */
export class FaceSwapService {
  private readonly db: Db;
  private readonly store: BlobStore;
  private readonly signer: UrlSigner;
  private readonly sources: SourceResolver;
  private readonly notifications: Notifications;
  private readonly events: EventSink;
  private readonly uploadLimits: UploadLimits;
  private readonly metrics: JobMetrics;

  constructor({ db, store, signer, sources, notifications, events, uploadLimits, metrics }: FaceSwapServiceOptions) {
    this.db = db;
    this.store = store;
    this.signer = signer;
    this.sources = sources;
    this.notifications = notifications;
    this.events = events;
    this.uploadLimits = uploadLimits;
    this.metrics = metrics;
  }

  createUploadUrls(principal: Principal, items: UploadItem[], now = new Date()) {
    const violations = new Violations();
    if (items.length === 0) violations.add("items", "at least one item is required");
    if (items.length > MAX_UPLOAD_ITEMS) violations.add("items", `at most ${MAX_UPLOAD_ITEMS} items`);
    items.forEach((item, i) => {
      const type = oneOf(violations, `items[${i}].type`, item.type, UPLOAD_TYPES);
      if (type === undefined) return;
      if (!/^[a-z0-9]+$/.test(item.extension)) {
        violations.add(`items[${i}].extension`, "must be lower-case letters and digits, without the dot (e.g. mp4)");
      } else {
        oneOf(violations, `items[${i}].extension`, item.extension, EXTENSIONS[type], `for ${type}`);
      }
    });
    violations.throwIfAny();
    const expiresAt = new Date(now.getTime() + UPLOAD_URL_TTL_MS);
    return items.map((item) => {
      const filePath = `${assetPrefix(principal.accountId)}${randomUUID()}.${item.extension}`;
      const maxBytes = this.uploadLimits[`${item.type as UploadType}Bytes`];
      return { uploadUrl: this.signer.sign("PUT", filePath, expiresAt, maxBytes), expiresAt, filePath };
    });
  }

  async createFaceSwap(principal: Principal, request: CreateFaceSwapRequest, signal: AbortSignal, now = new Date()): Promise<CreatedJob> {
    const checked = checkFaceSwap(request);
    // URL inputs fetched for this request: deleted again when it is refused.
    const imported: string[] = [];
    try {
      return await this.queueFaceSwap(principal, request, checked, imported, signal, now);
    } catch (error) {
      if (imported.length > 0) await this.store.delete(imported).catch(() => undefined);
      throw error;
    }
  }

  private async queueFaceSwap(
    principal: Principal,
    request: CreateFaceSwapRequest,
    checked: CheckedFaceSwap,
    imported: string[],
    signal: AbortSignal,
    now: Date,
  ): Promise<CreatedJob> {
    const accountId = principal.accountId;
    const resolve = async (field: string, value: string, kind: "video" | "image") => {
      const source = await this.sources.resolve(field, value, accountId, kind, signal);
      if (source.imported) imported.push(source.key);
      return source;
    };
    const video = await resolve(checked.videoField, checked.video, "video");
    const spec: JobSpec = { video: video.key, mode: checked.mode, style: checked.style, mappings: [] };
    if (checked.face !== undefined) {
      spec.face = (await resolve("assets.image_file_path", checked.face, "image")).key;
    }
    for (const [i, mapping] of checked.mappings.entries()) {
      const field = `assets.face_mappings[${i}]`;
      const original = await resolve(`${field}.original_face`, mapping.originalFace, "image");
      const replacement = await resolve(`${field}.new_face`, mapping.newFace, "image");
      spec.mappings!.push({ originalFace: original.key, newFace: replacement.key });
    }

    const { info } = video;
    const { startSeconds } = checked;
    if (startSeconds >= info.durationSeconds) {
      throw invalid("start_seconds", `must be before the end of the video (${info.durationSeconds} s)`);
    }
    const endSeconds = Math.min(checked.endSeconds, info.durationSeconds);
    const credits = quoteCredits(startSeconds, endSeconds, info.fps);
    const sizes = {
      free: outputSize(info.width, info.height, PLAN_MAX_LONG_SIDE.free),
      pro: outputSize(info.width, info.height, PLAN_MAX_LONG_SIDE.pro),
      business: outputSize(info.width, info.height, PLAN_MAX_LONG_SIDE.business),
    };
    const job = await repo.queueJobTakingCredits(this.db, {
      accountId,
      type: "FACE_SWAP",
      name: request.name || defaultName(now),
      spec,
      startSeconds,
      endSeconds,
      sizes,
      fps: info.fps,
      hasAudio: info.hasAudio,
      framesTotal: expectedFrames(startSeconds, endSeconds, info.fps),
      credits,
    });
    if (!job) {
      const shortfall = new Shortfall(credits, await billing.balance(this.db, accountId));
      await this.reportShortfall(accountId, shortfall);
      throw shortfall.toRpcError();
    }
    this.notifications.signal(JOBS_CHANNEL, "queued");
    return { id: job.id, credits, deprecationWarning: checked.deprecated ? DEPRECATED_SIZE : undefined };
  }

  async getProject(principal: Principal, id: string): Promise<JobRow> {
    return this.findJob(principal, "FACE_SWAP", id);
  }

  async listProjects(principal: Principal, request: { pageSize: number; pageToken: string }): Promise<{ rows: JobRow[]; nextPageToken: string }> {
    const violations = new Violations();
    const { limit, after } = keysetPage(violations, request, PROJECT_PAGES, parseJobCursor);
    violations.throwIfAny();
    const rows = await repo.listJobs(this.db, principal.accountId, "FACE_SWAP", after, limit + 1);
    return keysetResult(rows, limit, (row) => [row.created_us, row.id]);
  }

  /** Cancels an open project and refunds everything it reserved, in one transaction. */
  async cancelProject(principal: Principal, id: string): Promise<JobRow> {
    const job = await this.findJob(principal, "FACE_SWAP", id);
    if (job.status === "canceled") return job;
    if (job.status === "complete" || job.status === "error") {
      throw failedPrecondition(`the project is already ${job.status}`, "PROJECT_FINISHED");
    }
    const canceled = await this.db.transaction().execute(async (tx) => {
      const row = await repo.finishJob(tx, job.id, { status: "canceled", framesRendered: job.frames_rendered, creditsCharged: 0 });
      if (row) await billing.refund(tx, row, "canceled");
      return row;
    });
    // It finished in the meantime: report what it is now.
    if (!canceled) return this.cancelProject(principal, id);
    this.metrics.finished(canceled.type, "canceled");
    this.notifications.signal(JOBS_CHANNEL, `cancel:${job.id}`);
    return canceled;
  }

  /** Removes the outputs for good (cancelling first when still open); the record stays, disabled. */
  async deleteProject(principal: Principal, id: string): Promise<void> {
    const job = await this.findJob(principal, "FACE_SWAP", id);
    if (job.status === "queued" || job.status === "rendering") {
      await this.cancelProject(principal, id).catch((error: unknown) => {
        // It finished between the read and the cancel: delete it like any finished project.
        if (!(error instanceof RpcError && error.reason === "PROJECT_FINISHED")) throw error;
      });
    }
    const keys = await this.db.transaction().execute((tx) => repo.disableJob(tx, principal.accountId, job.id));
    if (keys && keys.length > 0) await this.store.delete(keys);
  }

  async createFaceDetection(principal: Principal, request: CreateFaceDetectionRequest, signal: AbortSignal): Promise<string> {
    const violations = new Violations();
    const target = request.assets?.targetFilePath ?? "";
    if (!request.assets) violations.add("assets", "is required");
    else if (target === "") violations.add("assets.target_file_path", "is required");
    const confidence = request.confidenceScore ?? DEFAULT_CONFIDENCE;
    if (!(confidence > 0 && confidence <= 1)) violations.add("confidence_score", "must be greater than 0 and at most 1");
    violations.throwIfAny();
    const source = await this.sources.resolve("assets.target_file_path", target, principal.accountId, "any", signal);
    const job = await repo.insertJob(this.db, {
      accountId: principal.accountId,
      type: "FACE_DETECTION",
      name: "Face Detection",
      spec: { target: source.key, confidence },
      startSeconds: 0,
      endSeconds: source.info.durationSeconds,
      width: source.info.width,
      height: source.info.height,
      fps: source.info.fps,
      hasAudio: false,
      framesTotal: 0,
      credits: 0,
    });
    this.notifications.signal(JOBS_CHANNEL, "queued");
    return job.id;
  }

  async getFaceDetection(principal: Principal, id: string): Promise<JobRow> {
    return this.findJob(principal, "FACE_DETECTION", id);
  }

  /** Signed GET links to the blobs, valid 24 h from now: presigned by the store when it can, else by this service. */
  async downloadLinks(keys: string[], now = new Date()): Promise<SignedLink[]> {
    const expiresAt = new Date(now.getTime() + DOWNLOAD_URL_TTL_MS);
    return Promise.all(
      keys.map(async (key) => ({
        url: (await this.store.presignedDownloadUrl(key, DOWNLOAD_URL_TTL_MS / 1000)) ?? this.signer.sign("GET", key, expiresAt),
        expiresAt,
      })),
    );
  }

  private async findJob(principal: Principal, type: "FACE_SWAP" | "FACE_DETECTION", id: string): Promise<JobRow> {
    const what = type === "FACE_SWAP" ? "video project" : "face detection";
    if (id === "") throw invalid("id", "is required");
    const job = isUuid(id) ? await repo.findJob(this.db, principal.accountId, type, id) : undefined;
    if (!job) throw notFound(`${what} "${id}"`, type === "FACE_SWAP" ? "PROJECT_NOT_FOUND" : "FACE_DETECTION_NOT_FOUND");
    return job;
  }

  private async reportShortfall(accountId: string, shortfall: Shortfall): Promise<void> {
    await this.events.emit(this.db, accountId, "quota.exceeded", {
      quota: "credits",
      required: shortfall.required,
      balance: shortfall.balance,
      shortfall: shortfall.required - shortfall.balance,
    });
    this.events.wake();
  }
}

const DEPRECATED_SIZE = "width and height are deprecated and ignored: the output size follows the video and the account's plan";

interface CheckedFaceSwap {
  video: string;
  videoField: string;
  mode: FaceSwapMode;
  face: string | undefined;
  mappings: { originalFace: string; newFace: string }[];
  style: StyleVersion;
  startSeconds: number;
  endSeconds: number;
  deprecated: boolean;
}

/** Every shape rule of the create request, all reported at once. */
function checkFaceSwap(request: CreateFaceSwapRequest): CheckedFaceSwap {
  const v = new Violations();
  const assets = request.assets;
  let video = "";
  let videoField = "assets.video_file_path";
  let face: string | undefined;
  let mode: CheckedFaceSwap["mode"] = "all-faces";
  const mappings: CheckedFaceSwap["mappings"] = [];
  if (!assets) {
    v.add("assets", "is required");
  } else {
    const source = assets.videoSource;
    if (source === "") v.add("assets.video_source", "is required: file or stream");
    else if (!(VIDEO_SOURCES as readonly string[]).includes(source)) v.add("assets.video_source", `must be file or stream, got "${source}"`);
    else if (source === "file") {
      video = assets.videoFilePath;
      if (video === "") v.add("assets.video_file_path", "is required when video_source is file");
    } else {
      video = assets.streamUrl || assets.youtubeUrl;
      videoField = assets.streamUrl ? "assets.stream_url" : assets.youtubeUrl ? "assets.youtube_url" : "assets.stream_url";
      if (video === "") v.add("assets.stream_url", `is required when video_source is ${source}`);
    }
    const requestedMode = assets.faceSwapMode || "all-faces";
    if (!(FACE_SWAP_MODES as readonly string[]).includes(requestedMode)) {
      v.add("assets.face_swap_mode", `must be all-faces or individual-faces, got "${requestedMode}"`);
    } else if (requestedMode === "all-faces") {
      mode = "all-faces";
      face = assets.imageFilePath;
      if (face === "") v.add("assets.image_file_path", "is required when face_swap_mode is all-faces");
    } else {
      mode = "individual-faces";
      if (assets.faceMappings.length === 0) v.add("assets.face_mappings", "needs at least one mapping when face_swap_mode is individual-faces");
      if (assets.faceMappings.length > MAX_FACE_MAPPINGS) v.add("assets.face_mappings", `at most ${MAX_FACE_MAPPINGS} mappings`);
      assets.faceMappings.forEach((m, i) => {
        if (m.originalFace === "") v.add(`assets.face_mappings[${i}].original_face`, "is required");
        if (m.newFace === "") v.add(`assets.face_mappings[${i}].new_face`, "is required");
        mappings.push({ originalFace: m.originalFace, newFace: m.newFace });
      });
    }
  }
  const { startSeconds, endSeconds } = request;
  if (startSeconds === undefined) v.add("start_seconds", "is required (seconds from the start of the video, >= 0)");
  else if (!Number.isFinite(startSeconds)) v.add("start_seconds", `must be a finite number of seconds, got ${startSeconds}`);
  else if (startSeconds < 0) v.add("start_seconds", "must be a number >= 0");
  if (endSeconds === undefined) v.add("end_seconds", "is required (seconds, greater than start_seconds)");
  else if (!Number.isFinite(endSeconds)) v.add("end_seconds", `must be a finite number of seconds, got ${endSeconds}`);
  else if (Number.isFinite(startSeconds ?? 0) && !(endSeconds > (startSeconds ?? 0))) {
    v.add("end_seconds", `must be greater than start_seconds (${startSeconds ?? 0})`);
  }
  if (request.name.length > MAX_NAME_LENGTH) v.add("name", `at most ${MAX_NAME_LENGTH} characters`);
  const version = request.style?.version || "default";
  if (!(STYLE_VERSIONS as readonly string[]).includes(version)) v.add("style.version", `must be v1, v2 or default, got "${version}"`);
  v.throwIfAny();
  const style = version === "default" ? RECOMMENDED_STYLE : (version as StyleVersion);
  return {
    video,
    videoField,
    mode,
    face,
    mappings,
    style,
    startSeconds: startSeconds!,
    endSeconds: endSeconds!,
    deprecated: request.width !== undefined || request.height !== undefined,
  };
}

class Shortfall {
  constructor(
    readonly required: number,
    readonly balance: number,
  ) {}

  toRpcError(): RpcError {
    const missing = this.required - this.balance;
    return new RpcError(
      Code.RESOURCE_EXHAUSTED,
      `insufficient credits: the clip needs ${this.required} credits, the balance is ${this.balance} (short by ${missing})`,
      {
        reason: "INSUFFICIENT_CREDITS",
        fieldViolations: [{ field: "end_seconds", description: `the clip costs ${this.required} credits; ${missing} more are needed` }],
        metadata: { required: String(this.required), balance: String(this.balance), shortfall: String(missing) },
      },
    );
  }
}

function invalid(field: string, description: string): RpcError {
  return invalidArgument([{ field, description }]);
}

/** A page token holds the last project's [created_us, id]. */
function parseJobCursor(value: unknown): repo.JobCursor | undefined {
  if (!Array.isArray(value)) return undefined;
  const [createdUs, id] = value as unknown[];
  return Number.isSafeInteger(createdUs) && typeof id === "string" && isUuid(id) ? { createdUs: createdUs as number, id } : undefined;
}
