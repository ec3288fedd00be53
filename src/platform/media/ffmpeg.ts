import { spawn } from "node:child_process";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

/** The static ffmpeg shipped inside @ffmpeg-installer (libx264 included); FFMPEG_PATH overrides it. */
export const ffmpegPath: string =
  process.env.FFMPEG_PATH || (require("@ffmpeg-installer/ffmpeg") as { path: string }).path;

export interface MediaInfo {
  /** Seconds; 0 for a still image. */
  durationSeconds: number;
  width: number;
  height: number;
  /** Frames per second of the video stream; 0 for a still image. */
  fps: number;
  hasAudio: boolean;
  /** A still image (one frame, no duration) rather than a video. */
  still: boolean;
}

export class MediaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MediaError";
  }
}

const STILL_CODECS = new Set(["png", "mjpeg", "bmp", "tiff", "webp", "jpeg2000", "gif", "pam", "ppm"]);

/**
 * Reads duration, size, fps and audio presence from `ffmpeg -i` (the package ships no ffprobe). `input`
 * is a local path or an http(s) URL. Rejects with MediaError when ffmpeg cannot decode it.
 */
export async function probeMedia(input: string, signal?: AbortSignal): Promise<MediaInfo> {
  const stderr = await runFfmpeg(["-hide_banner", "-nostdin", "-i", input], { allowFailure: true, signal });
  const info = parseProbe(stderr);
  if (info.still) return info;
  // The container's Duration is its longest stream's: sound that runs on past the picture would let
  // a clip range with no frame in it through. Counting the video stream's packets (a copy, no
  // decoding) gives the picture's own length, and the only one of an animated GIF (Duration: N/A).
  const counted = await runFfmpeg(["-hide_banner", "-nostdin", "-i", input, "-map", "0:v:0", "-c", "copy", "-f", "null", "-"], { signal });
  const frames = Number([...counted.matchAll(/frame=\s*(\d+)/g)].at(-1)?.[1] ?? 0);
  const pictureSeconds = frames > 0 && info.fps > 0 ? frames / info.fps : info.durationSeconds;
  const durationSeconds = info.durationSeconds > 0 ? Math.min(info.durationSeconds, pictureSeconds) : pictureSeconds;
  if (!(durationSeconds > 0)) throw new MediaError("video has no duration");
  return { ...info, durationSeconds };
}

/** Parses the stderr of `ffmpeg -i`. */
function parseProbe(stderr: string): MediaInfo {
  const videoLine = /Stream #\d+:\d+(?:\[\w+\])?(?:\(\w+\))?: Video: (\w+)[^\n]*/.exec(stderr);
  if (!videoLine) {
    const reason = /: (Invalid data found[^\n]*|No such file[^\n]*|[^\n]*not found)/.exec(stderr)?.[1];
    throw new MediaError(reason ? `not a decodable video or image (${reason.trim()})` : "no video stream found");
  }
  const line = videoLine[0];
  const size = /, (\d{2,5})x(\d{2,5})[ ,]/.exec(line);
  if (!size) throw new MediaError("video stream has no frame size");
  const fpsMatch = /, ([\d.]+)(k?) fps/.exec(line) ?? /, ([\d.]+)(k?) tbr/.exec(line);
  const duration = /Duration: (\d+):(\d{2}):(\d{2}(?:\.\d+)?)/.exec(stderr);
  const codec = videoLine[1] ?? "";
  const isImageDemuxer = /Input #0, (image2|png_pipe|jpeg_pipe|bmp_pipe|webp_pipe|tiff_pipe)/.test(stderr);
  const still = isImageDemuxer || (STILL_CODECS.has(codec) && codec !== "gif" && !duration);
  const durationSeconds =
    still || !duration ? 0 : Number(duration[1]) * 3600 + Number(duration[2]) * 60 + Number(duration[3]);
  const fps = still || !fpsMatch ? 0 : Number(fpsMatch[1]) * (fpsMatch[2] === "k" ? 1000 : 1);
  const rotation = /rotate\s*:\s*(-?\d+)/.exec(stderr) ?? /rotation of (-?[\d.]+) degrees/.exec(stderr);
  const turned = rotation ? Math.abs(Math.round(Number(rotation[1]))) % 180 === 90 : false;
  // Stored pixels need not be square (anamorphic footage): the size reported is the one shown, so
  // frames are scaled to square pixels rather than drawn squashed.
  const sar = /\[SAR (\d+):(\d+) DAR/.exec(line);
  const stretch = sar && Number(sar[1]) > 0 && Number(sar[2]) > 0 ? Number(sar[1]) / Number(sar[2]) : 1;
  const shownWidth = Math.max(1, Math.round(Number(size[1]) * stretch));
  const [width, height] = turned ? [Number(size[2]), shownWidth] : [shownWidth, Number(size[2])];
  return { durationSeconds, width, height, fps, hasAudio: /Stream #\d+:\d+[^\n]*: Audio: /.test(stderr), still };
}

export interface RunOptions {
  signal?: AbortSignal;
  /** Resolve with stderr even when ffmpeg exits non-zero (probing exits 1 by design). */
  allowFailure?: boolean;
}

/** Runs ffmpeg to completion and returns its stderr; a non-zero exit rejects with its last lines. */
export function runFfmpeg(args: string[], options: RunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(ffmpegPath, args, { stdio: ["ignore", "ignore", "pipe"], signal: options.signal });
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-64 * 1024);
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0 || options.allowFailure) resolve(stderr);
      else reject(new MediaError(`ffmpeg exited with ${code}: ${stderr.trim().split("\n").slice(-3).join(" | ")}`));
    });
  });
}

/**
 * Long side capped at `maxLongSide` (never upscaled), both sides even, aspect kept: each side the even
 * number nearest its scaled length (4096x2730 at 1080 is 1080x720, not 1080x718), never past the
 * source's own even size.
 */
export function outputSize(width: number, height: number, maxLongSide: number): { width: number; height: number } {
  const scale = Math.min(1, maxLongSide / Math.max(width, height));
  const even = (n: number) => Math.max(2, Math.min(2 * Math.floor(n / 2), 2 * Math.round((n * scale) / 2)));
  return { width: even(width), height: even(height) };
}
