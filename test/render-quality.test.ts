import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { VIDEO_ENCODING } from "../src/faceswap/render/ffmpeg-frames.js";
import { decodeFrames, type RgbImage } from "../src/faceswap/render/images.js";
import { createFaceSwapEngine } from "../src/faceswap/render/index.js";
import type { FaceData } from "../src/faceswap/render/protocol.js";
import type { Renderer } from "../src/faceswap/renderer.js";
import type { StyleVersion } from "../src/platform/db/schema.js";
import { createLogger } from "../src/platform/logger.js";
import { runFfmpeg } from "../src/platform/media/ffmpeg.js";
import { addHand, makeClip, occluderBox, samplePhoto, type ClipOptions, type OccluderMask } from "./support/footage.js";
import {
  briefRuns, CHROMA_GRAIN_MEDIAN, clipFailures, failures, formatSummary, GRAIN_MEDIAN, IDENTITY_LIMITS, identityFailures, LIMITS, MARKS_LIMIT, MARKS_SHADE_LIMIT, occluderPaintedOver, QualityJudge, summarise, type FaceScore, type Measure,
} from "./support/quality.js";

const artifacts = path.join(import.meta.dirname, "..", "test-artifacts", "render-quality");
const WIDTH = 576, HEIGHT = 384, FPS = 10, SECONDS = 1.2;
/** Judged frames (each with the next, for flicker); the occluder crosses the middle face at 0.6 s. */
const FRAMES = [2, 6, 9];

interface Clip {
  name: string;
  file: string;
  frames: RgbImage[];
  options: ClipOptions;
  /** The hand's opacity per frame, where one crosses a face (see addHand). */
  hand?: OccluderMask[];
}

let dir: string;
let renderer: Renderer;
let judge: QualityJudge;
let newFace: string;
let newFaceImage: RgbImage;
const clips: Clip[] = [];

const CLIPS: Array<[string, ClipOptions]> = [
  // sample1's three people, panned and zoomed.
  ["pan", { seconds: SECONDS, fps: FPS, width: WIDTH }],
  // sample4's left woman looks back over her shoulder: a head turned well to the side.
  ["turned", { seconds: SECONDS, fps: FPS, width: WIDTH, photo: samplePhoto(4), crop: "960:640:0:60" }],
  ["occluded", { seconds: SECONDS, fps: FPS, width: WIDTH, occluder: true }],
  // sample2's middle woman looks down, hair falling over her brow: a face whose detector box is
  // taller than its features (see cropAround). Meshed from that box, the new nose lay on her lip.
  ["sofa", { seconds: SECONDS, fps: FPS, width: WIDTH, photo: samplePhoto(2) }],
  // The pan with a real hand, skin-coloured, crossing the middle face (see addHand).
  ["hand", { seconds: SECONDS, fps: FPS, width: WIDTH }],
  // The pan at 25 frames a second. At 10, each frame of a worker's share differs from its last as a new
  // scene does and is meshed; at 25, the judged frames 2, 3, 6, 7 and 10 lie between meshed ones and
  // are drawn from the meshes on either side (see SwapStage).
  ["pan-25fps", { seconds: SECONDS, fps: 25, width: WIDTH }],
];

/**
 * Clips whose faces are not each judged on sharpness as their own re-encoded output: x264 softens the
 * pan at 25 frames a second more than at 10, and the footage re-encoded as its own output kept
 * 0.51-0.59 of its Laplacian variance on frame 9, below the judge's bound for a face. Rendered, their
 * median sharpness answers to what re-encoding alone keeps (see clipFailures), as every clip's does.
 */
const SOFT_FOOTAGE = new Set(["pan-25fps"]);

const reencodes = new Map<string, Promise<{ output: RgbImage[]; scores: FaceScore[] }>>();

/** The clip re-encoded as its own output, and its scores (with a contact sheet); made once per clip. */
function reencoded(clip: Clip): Promise<{ output: RgbImage[]; scores: FaceScore[] }> {
  let made = reencodes.get(clip.name);
  if (!made) {
    made = (async () => {
      const file = path.join(dir, `${clip.name}-same.mp4`);
      await reencode(clip.file, file);
      const output = await frames(file);
      return { output, scores: await judge.judge(clip.frames, output, FRAMES, path.join(artifacts, `${clip.name}-same.png`), clip.hand) };
    })();
    reencodes.set(clip.name, made);
  }
  return made;
}

/**
 * Bound on the share of a hand in front of a face that a render paints over (occluderPaintedOver).
 * Re-encoding alone changes 0.027 of it (H.264 along its edge); keeping the target's pixels only where
 * they are not skin-coloured painted over 0.57 (v1) and 0.62 (v2); keeping the hands
 * Human's hand models find, 0.028 (v1) and 0.030 (v2), and 0.081 (v1 and v2) once the pixels of
 * their keypoints' hull and wide bones that are not the hand's colour (the face's eye make-up) are
 * left out of them: the index finger's end at the lips, past its keypoints, took the new face's lips
 * and skin, and a bent finger's nail was a grey smudge. Grown by the hand's colour past the keypoints
 * (see growByColour), 0.025 (v1) and 0.029 (v2).
 */
const HAND_PAINTED = 0.045;

/** How far the median tone on dark footage may be from the input's (see "dark footage"). */
const DARK_TONE_OFF = 0.04;

/** `input` encoded again as the renderer encodes its output (VIDEO_ENCODING), through `filters` if any. */
async function reencode(input: string, output: string, filters: string[] = []): Promise<void> {
  await runFfmpeg(["-y", "-loglevel", "error", "-i", input, ...filters, ...VIDEO_ENCODING, output]);
}

async function frames(video: string): Promise<RgbImage[]> {
  return (await decodeFrames(video, { maxLongSide: WIDTH, maxFrames: 1000 })).frames;
}

async function render(clip: Clip, style: StyleVersion): Promise<RgbImage[]> {
  const output = path.join(dir, `${clip.name}-${style}.mp4`);
  await renderer.render({
    video: clip.file, startSeconds: 0, endSeconds: SECONDS, width: WIDTH, height: HEIGHT, fps: clip.options.fps ?? FPS, hasAudio: false,
    mode: "all-faces", face: newFace, mappings: [], style, output, signal: new AbortController().signal,
  });
  return frames(output);
}

/**
 * Share of the occluder's pixels (inset by 2) over the clip that the render changed by more than 10 in
 * luma; it is in front of a face for a third of the clip. See makeClip's occluder.
 */
function occluderChange(input: RgbImage[], output: RgbImage[]): number {
  let changed = 0, n = 0;
  for (const [f, before] of input.entries()) {
    const after = output[f]!;
    const { width, height } = before;
    const { x: x0, y: y0, w, h } = occluderBox(f / FPS, SECONDS, width, height);
    for (let y = Math.max(0, y0 + 2); y < Math.min(height, y0 + h - 2); y++) {
      for (let x = Math.max(0, x0 + 2); x < Math.min(width, x0 + w - 2); x++) {
        const p = (y * width + x) * 3;
        const luma = (img: RgbImage) => 0.299 * img.pixels[p]! + 0.587 * img.pixels[p + 1]! + 0.114 * img.pixels[p + 2]!;
        n++;
        if (Math.abs(luma(before) - luma(after)) > 10) changed++;
      }
    }
  }
  return changed / Math.max(1, n);
}

function report(name: string, scores: FaceScore[]): string {
  const lines = scores.map((s) => `  frame ${s.frame} face ${s.face}: ${failures(s).join(", ") || "ok"}`);
  const summary = summarise(scores);
  return `${name}: ${formatSummary(summary)}; identity ${identityFailures(summary).join(", ") || "ok"}\n${lines.join("\n")}`;
}

/** Each face's box blurred (a box blur over a tenth of the face): a soft, ghostly face. */
function blurredBoxes(image: RgbImage, faces: FaceData[]): RgbImage {
  const out = { ...image, pixels: Uint8Array.from(image.pixels) };
  for (const face of faces) {
    const [bx, by, bw, bh] = face.box.map(Math.round) as [number, number, number, number];
    const radius = Math.max(2, Math.round(Math.sqrt(bw * bh) / 10));
    for (let y = Math.max(0, by); y < Math.min(image.height, by + bh); y++) {
      for (let x = Math.max(0, bx); x < Math.min(image.width, bx + bw); x++) {
        for (let c = 0; c < 3; c++) {
          let sum = 0, n = 0;
          for (let dy = -radius; dy <= radius; dy += 2) {
            for (let dx = -radius; dx <= radius; dx += 2) {
              const sx = Math.min(image.width - 1, Math.max(0, x + dx)), sy = Math.min(image.height - 1, Math.max(0, y + dy));
              sum += image.pixels[(sy * image.width + sx) * 3 + c]!;
              n++;
            }
          }
          out.pixels[(y * image.width + x) * 3 + c] = sum / n;
        }
      }
    }
  }
  return out;
}

/**
 * Each face's box with an unsharp mask of 1.0 on luma (radius 1): the face outlined harder than the
 * footage around it, as a fixed sharpening left new faces on soft footage.
 */
function sharpenedBoxes(image: RgbImage, faces: FaceData[]): RgbImage {
  const out = { ...image, pixels: Uint8Array.from(image.pixels) };
  const luma = (x: number, y: number) => {
    const p = (Math.min(image.height - 1, Math.max(0, y)) * image.width + Math.min(image.width - 1, Math.max(0, x))) * 3;
    return 0.299 * image.pixels[p]! + 0.587 * image.pixels[p + 1]! + 0.114 * image.pixels[p + 2]!;
  };
  for (const face of faces) {
    const [bx, by, bw, bh] = face.box.map(Math.round) as [number, number, number, number];
    for (let y = Math.max(0, by); y < Math.min(image.height, by + bh); y++) {
      for (let x = Math.max(0, bx); x < Math.min(image.width, bx + bw); x++) {
        let around = 0;
        for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) around += luma(x + dx, y + dy);
        const high = luma(x, y) - around / 9;
        const p = (y * image.width + x) * 3;
        for (let c = 0; c < 3; c++) out.pixels[p + c] = Math.min(255, Math.max(0, Math.round(image.pixels[p + c]! + high)));
      }
    }
  }
  return out;
}

/** The new face's photo scaled into a rectangle over each face's box, grown by a tenth. */
function pastedRectangles(image: RgbImage, faces: FaceData[]): RgbImage {
  const out = { ...image, pixels: Uint8Array.from(image.pixels) };
  for (const face of faces) {
    const [bx, by, bw, bh] = face.box;
    const x0 = Math.round(bx - bw * 0.1), y0 = Math.round(by - bh * 0.1), w = Math.round(bw * 1.2), h = Math.round(bh * 1.2);
    for (let y = Math.max(0, y0); y < Math.min(image.height, y0 + h); y++) {
      for (let x = Math.max(0, x0); x < Math.min(image.width, x0 + w); x++) {
        const sx = Math.min(newFaceImage.width - 1, Math.floor(((x - x0) / w) * newFaceImage.width));
        const sy = Math.min(newFaceImage.height - 1, Math.floor(((y - y0) / h) * newFaceImage.height));
        out.pixels.set(newFaceImage.pixels.subarray((sy * newFaceImage.width + sx) * 3, (sy * newFaceImage.width + sx) * 3 + 3), (y * image.width + x) * 3);
      }
    }
  }
  return out;
}

/** The left `width` columns of `image`. */
function cropped(image: RgbImage, width: number): RgbImage {
  const pixels = new Uint8Array(width * image.height * 3);
  for (let y = 0; y < image.height; y++) {
    pixels.set(image.pixels.subarray(y * image.width * 3, (y * image.width + width) * 3), y * width * 3);
  }
  return { width, height: image.height, pixels };
}

/**
 * Each face's box moved sideways by a fifth of its eye distance: the face drawn off the target's, the
 * target's own far side showing beside it (as a mesh that stops short of the far cheek draws it).
 */
function shiftedFaces(image: RgbImage, faces: FaceData[]): RgbImage {
  const out = { ...image, pixels: Uint8Array.from(image.pixels) };
  for (const face of faces) {
    const m = face.mesh;
    const shift = Math.max(1, Math.round(0.2 * Math.hypot(m[2 * 33]! - m[2 * 263]!, m[2 * 33 + 1]! - m[2 * 263 + 1]!)));
    const [bx, by, bw, bh] = face.box.map(Math.round) as [number, number, number, number];
    for (let y = Math.max(0, by); y < Math.min(image.height, by + bh); y++) {
      for (let x = Math.max(0, bx); x < Math.min(image.width, bx + bw - shift); x++) {
        const from = (y * image.width + x + shift) * 3;
        out.pixels.set(image.pixels.subarray(from, from + 3), (y * image.width + x) * 3);
      }
    }
  }
  return out;
}

// A timeout is there to stop a hang, not to time a render. Each step's longest run on these two cores,
// with other test files beside it, was 270 s (the calibration), and the same machine runs up to twice
// as slowly on another day: one bound for every step, far past both.
const HANG_MS = 15 * 60_000;
/**
 * Shorter than this, a run of frames on which a face is swapped, or left as the footage has it,
 * shows as a flash (see briefRuns): the sofa clip's profile face, found on its first two frames only,
 * showed another person for a fifth of a second.
 */
const FLASH_SECONDS = 0.3;

/** The shortest run of frames of `clip` that is not a flash. */
function flashFrames(clip: Clip): number {
  return Math.ceil((clip.options.fps ?? FPS) * FLASH_SECONDS);
}

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "render-quality-"));
  await fs.mkdir(artifacts, { recursive: true });
  renderer = createFaceSwapEngine({ workers: 2, logger: createLogger("silent") });
  judge = await QualityJudge.start(createLogger("silent"));
  const crops = await (renderer as Renderer & import("../src/faceswap/renderer.js").FaceDetector).detect({
    input: samplePhoto(3), still: true, confidence: 0.5, outputDirectory: path.join(dir, "sample3"), signal: new AbortController().signal,
  });
  newFace = crops.find((face) => face.index === 1)!.png;
  newFaceImage = (await decodeFrames(newFace, { maxLongSide: 1024, maxFrames: 1 })).frames[0]!;
  await judge.setNewFace(newFaceImage);
  for (const [name, options] of CLIPS) {
    const made = await makeClip(path.join(dir, `${name}.mp4`), options);
    const file = name === "hand" ? path.join(dir, "hand-composited.mp4") : made;
    const hand = name === "hand" ? await addHand(made, file, FPS) : undefined;
    clips.push({ name, file, options, frames: await frames(file), ...(hand ? { hand } : {}) });
  }
}, HANG_MS);

afterAll(async () => {
  await renderer?.close();
  await judge?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

describe("quality judge", () => {
  it("scores the input re-encoded as its own output inside every limit, and identity unmoved", async () => {
    for (const clip of clips) {
      const { output, scores } = await reencoded(clip);
      console.log(report(`${clip.name} re-encoded`, scores));
      expect(scores.length).toBeGreaterThan(0);
      const judged = SOFT_FOOTAGE.has(clip.name) ? (Object.keys(LIMITS) as Measure[]).filter((name) => name !== "sharpness") : undefined;
      for (const score of scores) expect(failures(score, judged), report(clip.name, [score])).toEqual([]);
      const { faceres, faceApi } = summarise(scores);
      if (clip.hand) {
        const hand = await occluderPaintedOver(judge, clip.frames, output, clip.hand);
        console.log(`${clip.name} re-encoded: ${(hand.share * 100).toFixed(1)}% of the hand in front of a face changed (${hand.pixels} pixels)`);
        expect(hand.pixels, "hand pixels in front of a face").toBeGreaterThan(500);
        expect(hand.share, "share of the hand changed by re-encoding alone").toBeLessThan(HAND_PAINTED);
      }
      expect(await briefRuns(judge, clip.frames, output, flashFrames(clip)), `${clip.name} re-encoded: brief runs`).toEqual([]);
      expect(Math.abs(faceres), "faceres median shift from re-encoding alone").toBeLessThan(IDENTITY_LIMITS.faceres.min);
      expect(Math.abs(faceApi), "face-api median shift from re-encoding alone").toBeLessThan(IDENTITY_LIMITS.faceApi.min);
    }
  }, HANG_MS);

  it("refuses an output of another size than its input", async () => {
    const clip = clips[0]!;
    const { width, height } = clip.frames[0]!;
    const narrower = clip.frames.map((image) => cropped(image, image.width - 2));
    await expect(judge.judge(clip.frames, narrower, FRAMES)).rejects.toThrow(
      `judged frame ${FRAMES[0]}: the output is ${width - 2}x${height}, the input ${width}x${height}`,
    );
  });

  it("fails a blurred box or a sharpened one (sharpness), a pasted rectangle (outside, seam or colour, and skin colour) and a shifted face (misplaced, by both models)", async () => {
    for (const clip of clips.filter((c) => !c.options.occluder && !c.hand)) {
      const blurred: RgbImage[] = [], sharpened: RgbImage[] = [], pasted: RgbImage[] = [], shifted: RgbImage[] = [];
      for (const [i, image] of clip.frames.entries()) {
        const faces = FRAMES.includes(i) || FRAMES.includes(i - 1) ? await judge.faces(clip.frames[FRAMES.includes(i) ? i : i - 1]!) : [];
        blurred.push(blurredBoxes(image, faces));
        sharpened.push(sharpenedBoxes(image, faces));
        pasted.push(pastedRectangles(image, faces));
        shifted.push(shiftedFaces(image, faces));
      }
      const blurScores = await judge.judge(clip.frames, blurred, FRAMES, path.join(artifacts, `${clip.name}-blurred.png`));
      const sharpScores = await judge.judge(clip.frames, sharpened, FRAMES, path.join(artifacts, `${clip.name}-sharpened.png`));
      const pasteScores = await judge.judge(clip.frames, pasted, FRAMES, path.join(artifacts, `${clip.name}-pasted.png`));
      const shiftScores = await judge.judge(clip.frames, shifted, FRAMES, path.join(artifacts, `${clip.name}-shifted.png`));
      console.log(report(`${clip.name} blurred box`, blurScores));
      console.log(report(`${clip.name} sharpened box`, sharpScores));
      console.log(report(`${clip.name} pasted rectangle`, pasteScores));
      console.log(report(`${clip.name} shifted face`, shiftScores));
      for (const score of blurScores) expect(failures(score, ["sharpness"]), report(clip.name, [score])).not.toEqual([]);
      for (const score of sharpScores) expect(failures(score, ["sharpness"]), report(clip.name, [score])).not.toEqual([]);
      expect(clipFailures(summarise(sharpScores)), `${clip.name} sharpened box`).toContain(`median sharpness ${summarise(sharpScores).sharpness.toFixed(3)}`);
      for (const score of pasteScores) expect(failures(score, ["outside", "seam", "colourStep"]), report(clip.name, [score])).not.toEqual([]);
      // The new face's photo keeps its own skin tone: the clip's median must be out of bounds.
      const pasteSummary = summarise(pasteScores);
      expect(clipFailures(pasteSummary), `${clip.name} pasted rectangle`).toContain(`skinColour ${pasteSummary.skinColour.toFixed(3)}`);
      // Both models must see it: face-api's landmarks judge where Human's mesh of the input is wrong.
      for (const score of shiftScores) {
        for (const measure of ["misplaced", "misplacedApi"] as const) expect(failures(score, [measure]), report(clip.name, [score])).not.toEqual([]);
      }
    }
  }, HANG_MS);

  it("fails a face swapped on its first two frames alone (a flash), or left alone on two frames amid swapped ones, and passes one swapped throughout", async () => {
    const clip = clips.find((c) => c.name === "pan")!;
    const { output } = await reencoded(clip);
    const pastedOn = async (swapped: (frame: number) => boolean) =>
      Promise.all(output.map(async (image, f) => (swapped(f) ? pastedRectangles(image, await judge.faces(clip.frames[f]!)) : image)));
    const runs = async (swapped: (frame: number) => boolean) => briefRuns(judge, clip.frames, await pastedOn(swapped), flashFrames(clip));
    const flash = await runs((f) => f < 2);
    expect(flash.length, JSON.stringify(flash)).toBeGreaterThanOrEqual(3);
    for (const run of flash) expect(run).toMatchObject({ from: 0, to: 1, swapped: true });
    const through = await runs((f) => f !== 5 && f !== 6);
    expect(through.length, JSON.stringify(through)).toBeGreaterThanOrEqual(3);
    for (const run of through) expect(run).toMatchObject({ from: 5, to: 6, swapped: false });
    expect(await runs(() => true)).toEqual([]);
  }, HANG_MS);
});

describe("rendered faces", () => {
  it.each(["v1", "v2"] as const)("%s: nothing past the face, no speckles, seams, softness or flicker, identity moved (pan, turned head, occluded, looking down)", async (style) => {
    for (const clip of clips) {
      const output = await render(clip, style);
      const scores = await judge.judge(clip.frames, output, FRAMES, path.join(artifacts, `${clip.name}-${style}.png`), clip.hand);
      const text = report(`${clip.name} ${style}`, scores);
      console.log(text);
      expect(scores.length, text).toBeGreaterThan(0);
      // Every face, for the measures that are steady on one face; medians over the clip's faces, and
      // the share of its faces failing, for the rest.
      const summary = summarise(scores);
      expect(clipFailures(summary, summarise((await reencoded(clip)).scores)), text).toEqual([]);
      // The pan's left face wears clown make-up (dark marks around the eyes and on the cheeks): its marks
      // must be found there, or the check below would quietly stop running.
      if (clip.name === "pan") expect(summary.marks, `the pan's make-up found as marks\n${text}`).not.toBeNaN();
      // v1 keeps some of the footage's texture by design, make-up's edges among it (see MARKS_LIMIT).
      const marksLimit = style === "v1" ? MARKS_LIMIT.v1 : MARKS_LIMIT.max;
      if (!Number.isNaN(summary.marks)) expect(summary.marks, `share of the input's marks kept\n${text}`).toBeLessThan(marksLimit);
      const shadeLimit = style === "v1" ? MARKS_SHADE_LIMIT.v1 : MARKS_SHADE_LIMIT.max;
      if (!Number.isNaN(summary.marksShade)) expect(summary.marksShade, `shade of the darkest mark left\n${text}`).toBeLessThan(shadeLimit);
      // Identity, each clip: both recognisers for v2; v1 keeps the target's skin and light by design
      // (its weaker identity is documented) and answers to faceres.
      expect(identityFailures(summary).filter((failure) => style === "v2" || failure.startsWith("faceres")), text).toEqual([]);
      if (clip.options.occluder) expect(occluderChange(clip.frames, output), "share of the occluder painted over").toBeLessThan(0.01);
      expect(await briefRuns(judge, clip.frames, output, flashFrames(clip)), `${clip.name} ${style}: faces swapped or left alone for under ${FLASH_SECONDS} s`).toEqual([]);
      if (clip.hand) {
        const hand = await occluderPaintedOver(judge, clip.frames, output, clip.hand);
        console.log(`${clip.name} ${style}: ${(hand.share * 100).toFixed(1)}% of the hand in front of a face painted over (${hand.pixels} pixels)`);
        expect(hand.pixels, "hand pixels in front of a face").toBeGreaterThan(500);
        expect(hand.share, "share of the hand in front of a face painted over").toBeLessThan(HAND_PAINTED);
      }
    }
  }, HANG_MS);
});

describe("dark footage", () => {
  /**
   * The pan at 45 % of its brightness, under a new face from a bright photo: the relight must bring the
   * new face down to the skin around it, all the way. When v2 kept a tenth of the photo's light, the
   * darkest faces of the stairs came out 5-8 % lighter than their necks (tone 1.05-1.08), and here
   * v2's faces 20 % lighter (median tone 1.20, with a colour step of 4.8 at the outline); moved all the
   * way, 1.03 (v1 0.98).
   */
  let made: Promise<Clip> | undefined;
  /** The darkened pan, made once for both styles. */
  const dark = () =>
    (made ??= (async () => {
      const pan = clips.find((clip) => clip.name === "pan")!;
      const file = path.join(dir, "pan-dark.mp4");
      await reencode(pan.file, file, ["-vf", "colorchannelmixer=rr=0.45:gg=0.45:bb=0.45"]);
      return { name: "pan-dark", file, options: pan.options, frames: await frames(file) };
    })());

  it.each(["v1", "v2"] as const)("%s: the new face is as dark as the skin around it", async (style) => {
    const clip = await dark();
    const scores = await judge.judge(clip.frames, await render(clip, style), FRAMES, path.join(artifacts, `pan-dark-${style}.png`));
    const text = report(`pan-dark ${style}`, scores);
    console.log(text);
    expect(scores.length, text).toBeGreaterThan(0);
    expect(Math.abs(summarise(scores).tone - 1), `median tone\n${text}`).toBeLessThanOrEqual(DARK_TONE_OFF);
  }, HANG_MS);
});

describe("still faces", () => {
  /**
   * A camera and people holding still, with sensor noise (makeClip's `still`): any change of the new
   * face from frame to frame is shimmer, and it must change no more than the footage re-encoded as
   * its own output does (median flicker, same frames). A renderer that took the mesh's motion as a
   * whole from each frame's detection as it came passed on the detector's jitter of the whole mesh:
   * 0.40 against the footage's 0.29 (v2; 1.12-1.17 against 0.67 on the same photo encoded with less
   * noise); filtered (see FaceTracker), 0.19; with the footage's grain laid on the new face, which
   * changes from frame to frame as the footage's does, 0.24 (v2) and 0.19 (v1). That noise is grain the
   * new face must carry too, grey and coloured (GRAIN_MEDIAN, CHROMA_GRAIN_MEDIAN): drawn clean, it
   * looked pasted on.
   */
  const options = { seconds: SECONDS, fps: FPS, width: WIDTH, still: true };
  let footage: Promise<{ clip: Clip; flicker: number }> | undefined;
  /** The still clip and the median flicker of its faces re-encoded as its own output. */
  const still = () =>
    (footage ??= (async () => {
      const file = await makeClip(path.join(dir, "still-footage.mp4"), options);
      const clip: Clip = { name: "still", file, options, frames: await frames(file) };
      const reencoded = path.join(dir, "still-same.mp4");
      await reencode(file, reencoded);
      return { clip, flicker: summarise(await judge.judge(clip.frames, await frames(reencoded), FRAMES)).flicker };
    })());

  it.each(["v1", "v2"] as const)("%s: the new face changes from frame to frame no more than the footage does, and has its grain", async (style) => {
    const { clip, flicker } = await still();
    const scores = await judge.judge(clip.frames, await render(clip, style), FRAMES, path.join(artifacts, `still-${style}.png`));
    const text = report(`still ${style}`, scores);
    console.log(`still re-encoded: flicker ${flicker.toFixed(2)}\n${text}`);
    expect(scores.length, text).toBeGreaterThan(0);
    expect(summarise(scores).flicker, `median flicker, the footage re-encoded ${flicker.toFixed(2)}\n${text}`).toBeLessThanOrEqual(flicker);
    expect(summarise(scores).grain, `median grain\n${text}`).toBeGreaterThanOrEqual(GRAIN_MEDIAN.min);
    expect(summarise(scores).grain, `median grain\n${text}`).toBeLessThanOrEqual(GRAIN_MEDIAN.max);
    expect(summarise(scores).chromaGrain, `median chroma grain\n${text}`).toBeGreaterThanOrEqual(CHROMA_GRAIN_MEDIAN.min);
    expect(summarise(scores).chromaGrain, `median chroma grain\n${text}`).toBeLessThanOrEqual(CHROMA_GRAIN_MEDIAN.max);
  }, HANG_MS);
});
