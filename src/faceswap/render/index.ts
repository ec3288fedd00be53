import type { Logger } from "../../platform/logger.js";
import {
  RenderError,
  type DetectedFace,
  type FaceDetectionRequest,
  type FaceDetector,
  type Renderer,
  type RenderRequest,
  type RenderResult,
} from "../renderer.js";
import { renderFrames, type FrameStage } from "./pipeline.js";

export interface RendererOptions {
  /** Worker threads for detection and swapping; default 2. */
  workers: number;
  logger: Logger;
}

/** Interim stage: frames pass through unchanged while the swap stage is being built. */
const passThrough: FrameStage = { window: 1, process: (frame) => Promise.resolve(frame) };

class FaceSwapRenderer implements Renderer, FaceDetector {
  constructor(private readonly options: RendererOptions) {}

  async render(request: RenderRequest): Promise<RenderResult> {
    const started = performance.now();
    const frames = await renderFrames(request, passThrough);
    const seconds = (performance.now() - started) / 1000;
    this.options.logger.info({ frames, seconds, fps: frames / seconds, output: request.output }, "render finished");
    return { frames };
  }

  detect(request: FaceDetectionRequest): Promise<DetectedFace[]> {
    return Promise.reject(new RenderError("not_implemented", `face detection is not available yet (${request.input})`));
  }

  async close(): Promise<void> {}
}

export function createRenderer(options: RendererOptions): Renderer {
  return new FaceSwapRenderer(options);
}

export function createFaceDetector(options: RendererOptions): FaceDetector {
  return new FaceSwapRenderer(options);
}
