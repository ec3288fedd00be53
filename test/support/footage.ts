import fs from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { decodeFrames, type RgbImage } from "../../src/faceswap/render/images.js";
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
  /** How long the tone lasts, when shorter than the picture (a clip whose sound stops first). */
  audioSeconds?: number;
  /** Part of the photo to film, as ffmpeg's crop takes it (w:h:x:y, 3:2); default the whole photo. */
  crop?: string;
  /** A dark object (a glass held up, a hand) moves across the frame at face height. */
  occluder?: boolean;
  /**
   * A camera and people holding still: no pan or zoom, only a camera's sensor noise changing from
   * frame to frame (what a new face must not shimmer over).
   */
  still?: boolean;
}

/**
 * An H.264 MP4 made from one photo, slowly zoomed and panned so consecutive frames differ the way
 * camera footage does (or held still, with sensor noise; see `still`).
 */
export async function makeClip(output: string, options: ClipOptions): Promise<string> {
  const fps = options.fps ?? 25;
  const width = options.width ?? 640;
  const frames = Math.round(options.seconds * fps);
  const zoom = `zoompan=z='1+0.15*on/${frames}':x='iw/2-(iw/zoom/2)+on*0.5':y='ih/2-(ih/zoom/2)':d=1:s=${width}x${evenHeight(width)}:fps=${fps}`;
  const args = ["-y", "-loglevel", "error", "-loop", "1", "-framerate", String(fps), "-i", options.photo ?? samplePhoto(1)];
  if (options.audio) args.push("-f", "lavfi", "-i", `sine=frequency=440:duration=${options.audioSeconds ?? options.seconds}`);
  const camera = options.still ? [`scale=${width}:${evenHeight(width)}`, "noise=alls=8:allf=t"] : [`scale=${width * 2}:-2`, zoom];
  const filters = [options.crop ? `crop=${options.crop}` : "", ...camera].filter(Boolean).join(",");
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
  if (options.audio) args.push("-c:a", "aac", ...(options.audioSeconds === undefined ? ["-shortest"] : []));
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

/** An occluder's opacity (0..1) over one frame, row by row. */
export type OccluderMask = Float32Array;

// The hand of sample2's left woman (her index finger at her lips, fingers pointing right): its outline
// in that photo's pixels. Pixels darker than HAND_DARK inside it are the couch between her fingers.
const HAND_OUTLINE: ReadonlyArray<readonly [number, number]> = [
  [190, 377], [217, 347], [247, 322], [263, 315], [290, 322], [303, 330], [327, 335], [350, 333], [358, 347],
  [353, 360], [383, 358], [410, 361], [415, 368], [408, 375], [383, 381], [360, 390], [370, 400], [360, 413],
  [337, 425], [317, 440], [293, 451], [260, 447], [233, 447], [210, 463], [190, 477], [177, 447],
];
const HAND_DARK = [45, 75] as const;

// The hand comes into view a fifth of the way into the clip (`enter`), already in front of the middle
// face of sample1's pan (makeClip), and moves right, its finger from the cheek to past the mouth;
// shares of the frame (x of the wrist, y of the hand's top, its drop over the clip, the hand's width).
// Its light is dimmed to the pan's, which is darker than the photo it comes from.
const HAND = { enter: 0.2, from: 0.21, travel: 0.16, top: 0.37, drop: 0.03, width: 0.22, light: 0.8 };
/** How the hand moves over a clip: its shares of the frame as in HAND (the others stay HAND's). */
export type HandPath = Partial<Pick<typeof HAND, "enter" | "from" | "travel">>;
/** A hand that creeps in from outside the frame's left edge, reaching the cheek where HAND begins at the clip's end. */
export const CREEPING_HAND: HandPath = { enter: 0, from: -HAND.width, travel: HAND.from + HAND.width };

/**
 * Composites a real, skin-coloured hand (cut out of a demo photo) crossing a face onto every frame of
 * `input`, and writes the result to `output` (H.264). Returns each frame's hand opacity, for judging
 * how much of the hand a render paints over.
 */
export async function addHand(input: string, output: string, fps: number, handPath: HandPath = {}): Promise<OccluderMask[]> {
  const motion = { ...HAND, ...handPath };
  const { frames } = await decodeFrames(input, { maxLongSide: 4096, maxFrames: 10_000 });
  const photo = (await decodeFrames(samplePhoto(2), { maxLongSide: 4096, maxFrames: 1 })).frames[0]!;
  const hand = cutOut(photo);
  const { width, height } = frames[0]!;
  const masks: OccluderMask[] = [];
  const raw = Buffer.alloc(frames.length * width * height * 3);
  for (const [f, frame] of frames.entries()) {
    const t = frames.length > 1 ? f / (frames.length - 1) : 0;
    const scale = (HAND.width * width) / hand.width;
    const left = (motion.from + t * motion.travel) * width, top = (HAND.top + t * HAND.drop) * height;
    const mask = new Float32Array(width * height);
    for (let y = 0; y < (t >= motion.enter ? height : 0); y++) {
      for (let x = 0; x < width; x++) {
        const hx = (x + 0.5 - left) / scale - 0.5, hy = (y + 0.5 - top) / scale - 0.5;
        if (hx < 0 || hy < 0 || hx > hand.width - 1 || hy > hand.height - 1) continue;
        const ix = Math.min(hand.width - 2, Math.floor(hx)), iy = Math.min(hand.height - 2, Math.floor(hy));
        const fx = hx - ix, fy = hy - iy;
        const sample = (c: number) => {
          const at = (dx: number, dy: number) => hand.rgba[((iy + dy) * hand.width + ix + dx) * 4 + c]!;
          return (at(0, 0) * (1 - fx) + at(1, 0) * fx) * (1 - fy) + (at(0, 1) * (1 - fx) + at(1, 1) * fx) * fy;
        };
        const a = sample(3);
        if (a <= 0) continue;
        mask[y * width + x] = a;
        const p = (y * width + x) * 3;
        // Colours are premultiplied by opacity (see cutOut), so the edge does not take the couch's.
        for (let c = 0; c < 3; c++) frame.pixels[p + c] = Math.round(frame.pixels[p + c]! * (1 - a) + HAND.light * sample(c));
      }
    }
    masks.push(mask);
    raw.set(frame.pixels, f * width * height * 3);
  }
  const rawFile = `${output}.rgb`;
  await fs.writeFile(rawFile, raw);
  try {
    await runFfmpeg([
      "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", `${width}x${height}`, "-r", String(fps), "-i", rawFile,
      "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", output,
    ]);
  } finally {
    await fs.rm(rawFile, { force: true });
  }
  return masks;
}

/** The hand inside HAND_OUTLINE as premultiplied rgba floats, its outline antialiased (4x4 samples). */
function cutOut(photo: RgbImage): { rgba: Float32Array; width: number; height: number } {
  const xs = HAND_OUTLINE.map(([x]) => x), ys = HAND_OUTLINE.map(([, y]) => y);
  const x0 = Math.min(...xs), y0 = Math.min(...ys);
  const width = Math.max(...xs) - x0 + 1, height = Math.max(...ys) - y0 + 1;
  const rgba = new Float32Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      let inside = 0;
      for (let s = 0; s < 16; s++) inside += insidePolygon(HAND_OUTLINE, x0 + x + ((s % 4) + 0.5) / 4, y0 + y + ((s >> 2) + 0.5) / 4) ? 1 / 16 : 0;
      const p = ((y0 + y) * photo.width + x0 + x) * 3;
      const luma = 0.299 * photo.pixels[p]! + 0.587 * photo.pixels[p + 1]! + 0.114 * photo.pixels[p + 2]!;
      const a = inside * Math.min(1, Math.max(0, (luma - HAND_DARK[0]) / (HAND_DARK[1] - HAND_DARK[0])));
      const q = (y * width + x) * 4;
      for (let c = 0; c < 3; c++) rgba[q + c] = photo.pixels[p + c]! * a;
      rgba[q + 3] = a;
    }
  }
  return { rgba, width, height };
}

function insidePolygon(polygon: ReadonlyArray<readonly [number, number]>, x: number, y: number): boolean {
  let inside = false;
  for (let k = 0, j = polygon.length - 1; k < polygon.length; j = k++) {
    const [ax, ay] = polygon[k]!, [bx, by] = polygon[j]!;
    if (ay > y !== by > y && x < ((bx - ax) * (y - ay)) / (by - ay) + ax) inside = !inside;
  }
  return inside;
}
