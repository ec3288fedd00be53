import { randomUUID } from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import * as billing from "../billing/repository.js";
import type { BlobStore, LocalCopy } from "../platform/blobs/blob-store.js";
import { JOBS_CHANNEL } from "../platform/db/channels.js";
import type { Db } from "../platform/db/database.js";
import type { Notifications } from "../platform/db/notifications.js";
import type { JobRow } from "../platform/db/schema.js";
import type { Logger } from "../platform/logger.js";
import { Wakeup } from "../platform/wakeup.js";
import type { EventSink } from "./events.js";
import type { JobMetrics } from "./metrics.js";
import { RenderError, type FaceDetector, type Renderer } from "./renderer.js";
import * as repo from "./repository.js";
import { outputKey } from "./rules.js";

export interface JobRunnerSettings {
  /** Jobs this replica renders at once. */
  concurrency: number;
  /** How long a claim lasts without renewal; a crashed worker's job is claimed again after it. */
  leaseMs: number;
  /** Claims of one job before it is given up as `worker_lost` (a job that keeps killing its worker). */
  maxAttempts: number;
  /** How often an idle worker looks for work nobody announced (expired leases). */
  pollMs: number;
  /** Load the renderer at start, so the first job does not wait for its models. */
  preload: boolean;
}

export interface JobRunnerOptions {
  db: Db;
  store: BlobStore;
  renderer: Renderer;
  detector: FaceDetector;
  notifications: Notifications;
  events: EventSink;
  logger: Logger;
  metrics: JobMetrics;
  settings: JobRunnerSettings;
}

/** Why a running job was stopped without an outcome of its own. */
type StopReason = "canceled" | "lease_lost" | "shutdown";

/**
 * Claims queued jobs (FOR UPDATE SKIP LOCKED + lease), renders them, stores the outputs and settles
 * credits in the transaction that finishes the job. A notice on the jobs channel wakes idle workers
 * and stops a canceled job at once; lease renewals catch what a lost notice would miss.
 */
export class JobRunner {
  private readonly workerId = `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly running = new Map<string, AbortController>();
  private readonly loops: Promise<void>[] = [];
  private stopping = false;
  /** Notices wake every idle worker at once. */
  private readonly wakeup = new Wakeup();

  private readonly db: Db;
  private readonly store: BlobStore;
  private readonly renderer: Renderer;
  private readonly detector: FaceDetector;
  private readonly events: EventSink;
  private readonly logger: Logger;
  private readonly metrics: JobMetrics;
  private readonly settings: JobRunnerSettings;

  constructor({ db, store, renderer, detector, notifications, events, logger, metrics, settings }: JobRunnerOptions) {
    this.db = db;
    this.store = store;
    this.renderer = renderer;
    this.detector = detector;
    this.events = events;
    this.logger = logger;
    this.metrics = metrics;
    this.settings = settings;
    notifications.on(JOBS_CHANNEL, (payload) => {
      if (payload.startsWith("cancel:")) this.running.get(payload.slice("cancel:".length))?.abort("canceled" satisfies StopReason);
      else this.wakeup.wake();
    });
    notifications.onReconnect(() => this.wakeup.wake());
  }

  start(): void {
    if (this.settings.concurrency === 0) return;
    if (this.settings.preload) {
      this.renderer
        .prepare()
        .catch((error: unknown) => this.logger.warn({ event: "renderer_prepare_failed", err: error }, "could not load the renderer"));
    }
    for (let i = 0; i < this.settings.concurrency; i++) this.loops.push(this.loop());
  }

  /** Stops claiming, aborts running jobs and hands them back to the queue for another replica. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const controller of this.running.values()) controller.abort("shutdown" satisfies StopReason);
    this.wakeup.wake();
    await Promise.all(this.loops);
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      let job: JobRow | undefined;
      try {
        job = await repo.claimJob(this.db, this.workerId, this.settings.leaseMs);
      } catch (error) {
        this.logger.error({ event: "job_claim_failed", err: error }, "could not claim a job");
      }
      if (job) {
        // A fault outside the job's own handling (its scratch directory, recording the failure) must
        // not end this worker loop, nor the process: the lease runs out and the job is claimed again.
        await this.run(job).catch((error: unknown) =>
          this.logger.error({ event: "job_run_failed", job_id: job.id, err: error }, "job run failed"),
        );
        continue;
      }
      await this.wakeup.sleep(this.settings.pollMs);
    }
  }

  private async run(job: JobRow): Promise<void> {
    const log = this.logger.child({ job_id: job.id, job_type: job.type, attempt: job.attempts });
    if (job.attempts > this.settings.maxAttempts) {
      log.warn({ event: "job_given_up" }, "job lost its worker too many times");
      await this.fail(job, new RenderError("worker_lost", `rendering stopped ${job.attempts - 1} times without finishing`));
      return;
    }
    // First, so that a failure here leaves no lease renewal behind: the lease runs out and the job is claimed again.
    const workDir = await fs.mkdtemp(path.join(os.tmpdir(), "atrium-job-"));
    const controller = new AbortController();
    this.running.set(job.id, controller);
    const progress = { frames: job.frames_rendered };
    const renewal = setInterval(() => {
      repo.renewLease(this.db, job.id, this.workerId, this.settings.leaseMs, progress.frames).then(
        (mine) => {
          if (!mine) controller.abort("lease_lost" satisfies StopReason);
        },
        (error: unknown) => log.warn({ event: "job_lease_renewal_failed", err: error }, "lease renewal failed"),
      );
    }, renewalMs(this.settings.leaseMs));
    const copies: LocalCopy[] = [];
    const local = async (key: string) => {
      const copy = await this.store.localCopy(key);
      copies.push(copy);
      return copy.path;
    };
    const started = performance.now();
    try {
      if (job.attempts === 1 && job.type === "FACE_SWAP") await this.announce(job, "video.started");
      log.info({ event: "job_started" }, "job started");
      if (job.type === "FACE_SWAP") await this.renderFaceSwap(job, local, workDir, controller.signal, progress);
      else await this.detectFaces(job, local, workDir, controller.signal);
      log.info({ event: "job_finished", frames: progress.frames, ms: Math.round(performance.now() - started) }, "job finished");
    } catch (error) {
      const reason = controller.signal.aborted ? (controller.signal.reason as StopReason) : undefined;
      if (reason === "shutdown") await repo.releaseJob(this.db, job.id, this.workerId).catch(() => undefined);
      if (reason !== undefined) {
        log.info({ event: "job_stopped", reason }, "job stopped");
      } else {
        const failure = error instanceof RenderError ? error : new RenderError("unknown_error", "rendering failed unexpectedly");
        if (!(error instanceof RenderError)) log.error({ event: "job_crashed", err: error }, "job failed unexpectedly");
        else log.warn({ event: "job_failed", code: error.code, message: error.message }, "job failed");
        await this.fail(job, failure);
      }
    } finally {
      clearInterval(renewal);
      this.running.delete(job.id);
      await Promise.allSettled(copies.map((copy) => copy.release()));
      await fs.rm(workDir, { recursive: true, force: true });
    }
  }

  private async renderFaceSwap(
    job: JobRow,
    local: (key: string) => Promise<string>,
    workDir: string,
    signal: AbortSignal,
    progress: { frames: number },
  ): Promise<void> {
    const spec = job.spec;
    const output = path.join(workDir, "output.mp4");
    const mappings = [];
    for (const m of spec.mappings ?? []) mappings.push({ originalFace: await local(m.originalFace), newFace: await local(m.newFace) });
    const result = await this.renderer.render({
      video: await local(spec.video!),
      startSeconds: job.start_seconds,
      endSeconds: job.end_seconds,
      width: job.width,
      height: job.height,
      fps: job.fps,
      hasAudio: job.has_audio,
      mode: spec.mode ?? "all-faces",
      face: spec.face === undefined ? undefined : await local(spec.face),
      mappings,
      style: spec.style ?? "v2",
      output,
      signal,
      onProgress: (frames) => {
        progress.frames = frames;
      },
    });
    progress.frames = result.frames;
    const key = outputKey(job.account_id, job.id);
    await this.store.putFile(key, output, "video/mp4");
    // Never more than was quoted (the quote covers the frames the range holds; a source whose frame
    // count the probe misjudged could render a few more).
    const charged = Math.min(result.frames, job.credits_reserved);
    const finished = await this.db.transaction().execute(async (tx) => {
      const row = await repo.finishJob(
        tx,
        job.id,
        { status: "complete", framesRendered: result.frames, creditsCharged: charged, outputKeys: [key] },
        this.workerId,
      );
      if (!row) return undefined;
      await billing.settle(tx, row, charged, `rendered ${result.frames} frames`);
      await this.events.emit(tx, row.account_id, "video.completed", eventData(row));
      return row;
    });
    if (!finished) {
      // Canceled (and refunded) while the last frames were written: the output is nobody's.
      await this.store.delete([key]);
      throw new Error("job was taken away before it finished");
    }
    this.metrics.finished(job.type, "complete", result.frames);
    this.events.wake();
  }

  private async detectFaces(job: JobRow, local: (key: string) => Promise<string>, workDir: string, signal: AbortSignal): Promise<void> {
    const spec = job.spec;
    const faces = await this.detector.detect({
      input: await local(spec.target!),
      still: job.fps === 0,
      confidence: spec.confidence ?? 0.5,
      outputDirectory: workDir,
      signal,
    });
    const keys: string[] = [];
    for (const face of faces) {
      const key = `api-assets/${job.account_id}/${job.id}/${face.frame}-${face.index}.png`;
      await this.store.putFile(key, face.png, "image/png");
      keys.push(key);
    }
    const row = await repo.finishJob(this.db, job.id, { status: "complete", framesRendered: 0, creditsCharged: 0, outputKeys: keys }, this.workerId);
    if (row) this.metrics.finished(job.type, "complete");
    else await this.store.delete(keys);
  }

  /** Ends the job in `error` with a full refund, once. */
  private async fail(job: JobRow, error: RenderError): Promise<void> {
    const finished = await this.db.transaction().execute(async (tx) => {
      const row = await repo.finishJob(
        tx,
        job.id,
        { status: "error", framesRendered: 0, creditsCharged: 0, errorCode: error.code, errorMessage: error.message },
        this.workerId,
      );
      if (!row) return undefined;
      await billing.refund(tx, row, `failed: ${error.code}`);
      if (row.type === "FACE_SWAP") await this.events.emit(tx, row.account_id, "video.errored", eventData(row));
      return row;
    });
    if (!finished) return;
    this.metrics.finished(job.type, "error");
    this.events.wake();
  }

  private async announce(job: JobRow, event: string): Promise<void> {
    await this.events.emit(this.db, job.account_id, event, eventData(job));
    this.events.wake();
  }
}

/**
 * Leases are renewed at least every second, whatever their length: each renewal also records the
 * frames rendered (what clients show as progress) and notices a cancel whose notice was lost.
 */
function renewalMs(leaseMs: number): number {
  return Math.max(200, Math.min(1_000, Math.floor(leaseMs / 3)));
}

/** What a video.* event says about the project (download links are fetched with GetVideoProject). */
function eventData(job: JobRow): Record<string, unknown> {
  return {
    id: job.id,
    type: job.type,
    name: job.name,
    status: job.status,
    credits_charged: job.credits_charged,
    frames_rendered: job.frames_rendered,
    error: job.error_code ? { code: job.error_code, message: job.error_message ?? "" } : null,
  };
}
