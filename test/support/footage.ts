import { createRequire } from "node:module";
import path from "node:path";
import { runFfmpeg } from "../../src/platform/media/ffmpeg.js";

const require = createRequire(import.meta.url);
const demo = path.join(path.dirname(require.resolve("@vladmandic/face-api/package.json")), "demo");

/** Photos with several faces shipped by a dev dependency (never committed here): sample1..sample6. */
export function samplePhoto(n: 1 | 2 | 3 | 4 | 5 | 6): string {
  return path.join(demo, `sample${n}.jpg`);
}

export interface ClipOptions {
  /** Source photo; default sample1. */
  photo?: string;
  seconds: number;
  fps?: number;
  /** Output width (height follows the photo's aspect, even). */
  width?: number;
  /** Add a sine tone as an audio track. */
  audio?: boolean;
  /** Part of the photo to film, as ffmpeg's crop takes it (w:h:x:y, 3:2); default the whole photo. */
  crop?: string;
  /** A dark object (a glass held up, a hand) moves across the frame at face height. */
  occluder?: boolean;
}

/**
 * An H.264 MP4 made from one photo, slowly zoomed and panned so consecutive frames differ the way
 * camera footage does.
 */
export async function makeClip(output: string, options: ClipOptions): Promise<string> {
  const fps = options.fps ?? 25;
  const width = options.width ?? 640;
  const frames = Math.round(options.seconds * fps);
  const zoom = `zoompan=z='1+0.15*on/${frames}':x='iw/2-(iw/zoom/2)+on*0.5':y='ih/2-(ih/zoom/2)':d=1:s=${width}x${evenHeight(width)}:fps=${fps}`;
  const args = ["-y", "-loglevel", "error", "-loop", "1", "-framerate", String(fps), "-i", options.photo ?? samplePhoto(1)];
  if (options.audio) args.push("-f", "lavfi", "-i", `sine=frequency=440:duration=${options.seconds}`);
  const filters = [options.crop ? `crop=${options.crop}` : "", `scale=${width * 2}:-2`, zoom].filter(Boolean).join(",");
  if (options.occluder) {
    const box = occluderBox(0, options.seconds, width, evenHeight(width));
    args.push("-f", "lavfi", "-i", `color=c=0x283c64:s=${box.w}x${box.h}:r=${fps}`);
    const x = `${OCCLUDER.from}*W+t/${options.seconds}*${OCCLUDER.travel}*W`;
    args.push("-filter_complex", `[0:v]${filters}[bg];[bg][${options.audio ? 2 : 1}:v]overlay=x='${x}':y=${OCCLUDER.top}*H:eval=frame:shortest=1[v]`, "-map", "[v]");
    if (options.audio) args.push("-map", "1:a");
  } else {
    args.push("-vf", filters);
  }
  args.push("-frames:v", String(frames), "-c:v", "libx264", "-preset", "ultrafast");
  args.push("-pix_fmt", "yuv420p");
  if (options.audio) args.push("-c:a", "aac", "-shortest");
  args.push(output);
  await runFfmpeg(args);
  return output;
}

// A plain upright block (a glass held up, a finger) crosses the frame from left to right over the
// clip, in front of the middle face's cheek and mouth halfway through; shares of the frame.
const OCCLUDER = { from: -0.17, travel: 1.24, top: 0.4, width: 0.036, height: 0.3 };

/** Where makeClip's occluder is at `seconds` into a clip of `duration`, in pixels. */
export function occluderBox(seconds: number, duration: number, width: number, height: number): { x: number; y: number; w: number; h: number } {
  return {
    x: Math.floor((OCCLUDER.from + (seconds / duration) * OCCLUDER.travel) * width),
    y: Math.floor(OCCLUDER.top * height),
    w: 2 * Math.round((OCCLUDER.width * width) / 2),
    h: 2 * Math.round((OCCLUDER.height * height) / 2),
  };
}

/** A clip with no faces at all (ffmpeg's test pattern), for paths where faces do not matter. */
export async function makePatternClip(output: string, seconds: number, size = "320x240", fps = 25): Promise<string> {
  await runFfmpeg([
    "-y", "-loglevel", "error", "-f", "lavfi", "-i", `testsrc=size=${size}:rate=${fps}:duration=${seconds}`,
    "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", output,
  ]);
  return output;
}

// The demo photos are 3:2.
function evenHeight(width: number): number {
  return 2 * Math.round((width * 2) / 3 / 2);
}
