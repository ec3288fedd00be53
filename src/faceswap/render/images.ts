import path from "node:path";
import zlib from "node:zlib";
import { outputSize, probeMedia } from "../../platform/media/ffmpeg.js";
import { FfmpegProcess, readFrames } from "./ffmpeg-frames.js";

export interface RgbImage {
  pixels: Uint8Array;
  width: number;
  height: number;
}

/** ffmpeg decoded `input` without error, and `filter` let no frame through. */
export class NoFramesError extends Error {}

/** Frames of `input` as rgb24 at most `maxLongSide` on the long side; `filter` picks which (e.g. fps=1). */
export async function decodeFrames(
  input: string,
  options: { maxLongSide: number; maxFrames: number; filter?: string; signal?: AbortSignal },
): Promise<{ frames: RgbImage[]; fps: number }> {
  const info = await probeMedia(input, options.signal);
  const { width, height } = outputSize(info.width, info.height, options.maxLongSide);
  const filters = [options.filter, `scale=${width}:${height}`].filter(Boolean).join(",");
  const decoder = new FfmpegProcess(
    ["-hide_banner", "-nostdin", "-loglevel", "error", "-i", input, "-an", "-vf", filters,
      "-frames:v", String(options.maxFrames), "-pix_fmt", "rgb24", "-f", "rawvideo", "pipe:1"],
    "ignore",
    "pipe",
  );
  const onAbort = () => decoder.kill();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const frames: RgbImage[] = [];
    for await (const pixels of readFrames(decoder.child.stdout!, width * height * 3)) frames.push({ pixels, width, height });
    const code = await decoder.exited;
    if (code === 0 && frames.length === 0) throw new NoFramesError(`no frame of ${path.basename(input)} passed ${filters}`);
    if (code !== 0) throw new Error(`cannot decode ${path.basename(input)}: ${decoder.tail() || `exit ${code}`}`);
    return { frames, fps: info.fps };
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
}

/** The pixels of `image` inside [x, y, width, height], clamped to the image. */
export function crop(image: RgbImage, box: readonly [number, number, number, number]): RgbImage & { x: number; y: number } {
  const x = Math.max(0, Math.floor(box[0]));
  const y = Math.max(0, Math.floor(box[1]));
  const width = Math.min(image.width, Math.ceil(box[0] + box[2])) - x;
  const height = Math.min(image.height, Math.ceil(box[1] + box[3])) - y;
  const pixels = new Uint8Array(width * height * 3);
  for (let row = 0; row < height; row++) {
    const from = ((y + row) * image.width + x) * 3;
    pixels.set(image.pixels.subarray(from, from + width * 3), row * width * 3);
  }
  return { pixels, width, height, x, y };
}

/** A box grown by `margin` of its size on every side. */
export function grow(box: readonly number[], margin: number): [number, number, number, number] {
  const [x, y, w, h] = box as [number, number, number, number];
  return [x - w * margin, y - h * margin, w * (1 + 2 * margin), h * (1 + 2 * margin)];
}

/** An 8-bit RGB PNG (no filtering: crops are small and written once). */
export function encodePng(image: RgbImage): Buffer {
  const stride = image.width * 3;
  const raw = Buffer.alloc((stride + 1) * image.height);
  for (let row = 0; row < image.height; row++) {
    raw.set(image.pixels.subarray(row * stride, (row + 1) * stride), row * (stride + 1) + 1);
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(image.width, 0);
  header.writeUInt32BE(image.height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", zlib.deflateSync(raw)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

function chunk(type: string, data: Buffer): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, "ascii");
  data.copy(out, 8);
  out.writeUInt32BE(zlib.crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}
