import type { Logger } from "../../platform/logger.js";
import type {
  DetectedFace,
  FaceDetectionRequest,
  FaceDetector,
  Renderer,
  RenderRequest,
  RenderResult,
} from "../renderer.js";
import { detectFaces } from "./detector.js";
import { renderFrames, untilAborted } from "./pipeline.js";
import { loadJobFaces } from "./sources.js";
import { SwapStage } from "./swap-stage.js";
import { STYLES } from "./swap.js";
import { WorkerPool } from "./worker-pool.js";

export interface RendererOptions {
  /** Worker threads for detection and swapping; default 2. */
  workers: number;
  logger: Logger;
}

/** Renders and detects on one pool of workers, started on first use (loading the models takes seconds). */
class FaceSwapRenderer implements Renderer, FaceDetector {
  private pool: Promise<WorkerPool> | undefined;
  private nextJob = 1;

  constructor(private readonly options: RendererOptions) {}

  async render(request: RenderRequest): Promise<RenderResult> {
    const started = performance.now();
    const pool = await this.workers(request.signal);
    const job = this.nextJob++;
    // Analysed while the decoder starts and the first frames' faces are found: a render no longer
    // waits for its new face with one worker busy and the other idle.
    const faces = loadJobFaces(pool, request);
    faces.catch(() => {});
    const stage = new SwapStage(pool, {
      job,
      mode: request.mode,
      faces,
      style: STYLES[request.style],
      width: request.width,
      height: request.height,
      fps: request.fps,
    });
    let frames: number;
    try {
      frames = await renderFrames(request, stage);
    } catch (error) {
      await stage.end();
      // A face image without a face is what the caller must hear of, whatever the video did meanwhile.
      if (!request.signal.aborted) await faces;
      throw error;
    }
    const times = await stage.end();
    const seconds = (performance.now() - started) / 1000;
    // Where the workers' time went, per frame: what to look at first when a render is slow.
    const perFrame = times && Object.fromEntries(Object.entries(times).map(([part, ms]) => [part, Number((ms / frames).toFixed(1))]));
    this.options.logger.info(
      {
        event: "render_finished", frames, seconds: Number(seconds.toFixed(2)), fps: Number((frames / seconds).toFixed(1)), mode: request.mode, style: request.style,
        ...(perFrame && { worker_ms_per_frame: perFrame }),
      },
      "render finished",
    );
    return { frames };
  }

  async prepare(): Promise<void> {
    await this.workers(new AbortController().signal);
  }

  async detect(request: FaceDetectionRequest): Promise<DetectedFace[]> {
    return detectFaces(await this.workers(request.signal), request);
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    if (pool) await (await pool.catch(() => undefined))?.close();
  }

  private async workers(signal: AbortSignal): Promise<WorkerPool> {
    // A pool that failed to start or has lost a worker is replaced. Only the pool looked at is dropped:
    // a second caller that saw the same broken pool must not drop the replacement another caller has
    // started meanwhile (its workers would run on, unreferenced).
    const current = this.pool;
    const pool = await current?.catch(() => undefined);
    if (!pool || pool.broken) {
      if (this.pool === current) this.pool = undefined;
      await pool?.close();
    }
    this.pool ??= WorkerPool.start(Math.max(1, this.options.workers), this.options.logger);
    // Loading the models takes seconds; a cancel does not wait for it (the next render will).
    return untilAborted(this.pool, signal);
  }
}

/** The renderer and the face detector of one replica, on one pool of worker threads. */
export function createFaceSwapEngine(options: RendererOptions): Renderer & FaceDetector {
  return new FaceSwapRenderer(options);
}
