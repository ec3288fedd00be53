import { RenderError, type RenderRequest } from "../renderer.js";
import { expectedFrames } from "../rules.js";
import {
  readFrames,
  startDecoder,
  startEncoder,
  writeFrame,
  type FfmpegProcess,
  type FrameFormat,
} from "./ffmpeg-frames.js";

/** What happens to each decoded frame before it is encoded. */
export interface FrameStage {
  /** Resolves with the frame to encode (may be the same buffer). Frames are submitted in order. */
  process(frame: Buffer, index: number): Promise<Buffer>;
  /** Frames in flight at once: enough to keep every worker busy, few enough to bound memory. */
  readonly window: number;
  /** Told once the last frame has been submitted, with the number of frames: none follow. */
  ended(frames: number): void;
}

const PROGRESS_INTERVAL_MS = 250;

export function abortError(signal: AbortSignal): DOMException {
  const error = new DOMException("render cancelled", "AbortError");
  (error as { cause?: unknown }).cause = signal.reason;
  return error;
}

/** `promise`, or an AbortError as soon as `signal` aborts (the work itself is left to finish). */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/**
 * ffmpeg decodes the range to rgb24, `stage` transforms each frame (possibly several at once, in
 * order), and a second ffmpeg encodes them with the range's audio. Memory stays at `window` frames
 * plus the pipes: the decoder is only read as fast as the encoder accepts. Resolves with the number
 * of frames written.
 */
export async function renderFrames(request: RenderRequest, stage: FrameStage): Promise<number> {
  const { signal } = request;
  if (signal.aborted) throw abortError(signal);
  const format: FrameFormat = request;
  const expected = expectedFrames(format.startSeconds, format.endSeconds, format.fps);
  const decoder = startDecoder(format);
  const encoder = startEncoder(format, request.output, request.hasAudio);
  let rejectAborted: (error: unknown) => void = () => {};
  const aborted = new Promise<never>((_, reject) => (rejectAborted = reject));
  aborted.catch(() => {});
  const onAbort = () => {
    decoder.kill();
    encoder.kill();
    rejectAborted(abortError(signal));
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    return await pump(request, stage, decoder, encoder, expected, aborted);
  } catch (error) {
    decoder.kill();
    encoder.kill();
    throw signal.aborted ? abortError(signal) : error;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

async function pump(
  request: RenderRequest,
  stage: FrameStage,
  decoder: FfmpegProcess,
  encoder: FfmpegProcess,
  expected: number,
  aborted: Promise<never>,
): Promise<number> {
  const stdin = encoder.child.stdin!;
  const pending: Promise<Buffer>[] = [];
  let written = 0;
  let lastProgress = 0;
  const progress = (force: boolean) => {
    const now = performance.now();
    if (!request.onProgress || (!force && now - lastProgress < PROGRESS_INTERVAL_MS)) return;
    lastProgress = now;
    request.onProgress(written, Math.max(expected, written));
  };
  const writeNext = async () => {
    const frame = await Promise.race([pending.shift()!, aborted]);
    const accepted = await Promise.race([writeFrame(stdin, frame, encoder.exited), aborted]);
    if (!accepted) throw new RenderError("encode_failed", `encoder stopped: ${encoder.tail() || "no output"}`);
    written++;
    progress(false);
  };

  let index = 0;
  for await (const frame of readFrames(decoder.child.stdout!, request.width * request.height * 3)) {
    const result = stage.process(frame, index++);
    // A frame left behind when the render fails must not become an unhandled rejection.
    result.catch(() => {});
    pending.push(result);
    if (pending.length >= stage.window) await writeNext();
  }
  stage.ended(index);
  while (pending.length > 0) await writeNext();
  const decoderCode = await Promise.race([decoder.exited, aborted]);
  if (decoderCode !== 0) throw new RenderError("decode_failed", `decoder exited with ${decoderCode}: ${decoder.tail()}`);
  if (written === 0) throw new RenderError("decode_failed", "no frames in the requested range");
  stdin.end();
  const encoderCode = await Promise.race([encoder.exited, aborted]);
  if (encoderCode !== 0) throw new RenderError("encode_failed", `encoder exited with ${encoderCode}: ${encoder.tail()}`);
  progress(true);
  return written;
}
