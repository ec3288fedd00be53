import { MAD_TO_SD, middleBin } from "./pixels.js";
import { scratch } from "./scratch.js";

/**
 * The noise level of a luma plane: the median of |luma - its 3x3 median| over the pixels where `where`
 * is 1 (one pixel in from the edge, on every `step`-th row and column), scaled to a normal
 * distribution's sigma. A 3x3 median keeps edges and smooth shading, so what it takes away is grain:
 * sensor noise, and the finest texture. Undefined with too few pixels to tell.
 */
export function grainLevel(luma: Float32Array, w: number, h: number, where: (i: number) => boolean, step = 1): number | undefined {
  const counts = scratch("grainCounts", GRAIN_BINS).fill(0);
  let n = 0;
  for (let y = 1; y < h - 1; y += step) {
    for (let x = 1; x < w - 1; x += step) {
      const i = y * w + x;
      if (!where(i)) continue;
      counts[Math.min(GRAIN_BINS - 1, Math.floor(Math.abs(luma[i]! - median9(luma, i, w)) / GRAIN_BIN))]!++;
      n++;
    }
  }
  if (n < MIN_PIXELS) return undefined;
  return MAD_TO_SD * (middleBin(counts, 0, GRAIN_BINS, n) + 0.5) * GRAIN_BIN;
}

/**
 * Gives the new face (`warped`, rgb floats) the footage's grain where it has less: footage shot in low
 * light carries sensor noise, and a new face drawn from a clean photo on it looks pasted on, smooth
 * where everything around it is grainy. The grain laid on is the footage's own (its luma less its 3x3
 * median, where that is within GRAIN_CLIP of its level), so it changes from frame to frame as the
 * footage's does and has its size, scaled to make up the difference between the two faces' levels as
 * independent noises add (v1's footage detail, laid on before this, is the same noise in part, so
 * there the two add a little more). Luma only, added to every channel alike: chroma noise is what
 * encoders take first, and the target's would carry its make-up's colour.
 *
 * Measured and laid only where both faces are skin (`skin`, 1 there) and so is every pixel around:
 * at the target's eyes, lips and marks, and a pixel from them, the residual is their edges, not noise,
 * and would trace them on the new face. Clean footage (a level under MIN_LEVEL, as a photo or a
 * well-lit encode is) is left alone; above it, the grain fades in over GRAIN_FADE, so footage whose
 * level hovers there does not switch it on and off from frame to frame.
 */
export function matchGrain(warped: Float32Array, target: Float32Array, skin: Float32Array, w: number, h: number): void {
  const n = w * h;
  /** The least of `skin` over the 3x3 pixels about i. */
  const core = (i: number) =>
    Math.min(skin[i - w - 1]!, skin[i - w]!, skin[i - w + 1]!, skin[i - 1]!, skin[i]!, skin[i + 1]!, skin[i + w - 1]!, skin[i + w]!, skin[i + w + 1]!);
  const lumaTarget = lumaPlane(target, "grainTarget", n);
  // core(i) >= 1, spelled out: Math.min over nine values took twice as long on every pixel sampled
  // for the level, and on clean footage that is all the work there is.
  const whole = (i: number) =>
    skin[i]! >= 1 && skin[i - w]! >= 1 && skin[i + w]! >= 1 && skin[i - 1]! >= 1 && skin[i + 1]! >= 1 &&
    skin[i - w - 1]! >= 1 && skin[i - w + 1]! >= 1 && skin[i + w - 1]! >= 1 && skin[i + w + 1]! >= 1;
  // The levels need only a sample: every pixel of a face 250 px wide (at 1080 px) cost about 4 ms.
  const step = Math.max(1, Math.ceil(Math.sqrt(n / LEVEL_SAMPLES)));
  const footage = grainLevel(lumaTarget, w, h, whole, step);
  if (footage === undefined || footage < MIN_LEVEL) return;
  // Over the same pixels as the footage's level, so there are as many.
  const face = grainLevel(lumaPlane(warped, "grainWarped", n), w, h, whole, step)!;
  const missing = footage * footage - face * face;
  if (missing <= 0) return;
  const t = Math.min(1, (footage - MIN_LEVEL) / GRAIN_FADE);
  const gain = (t * t * (3 - 2 * t) * Math.sqrt(missing)) / footage, clip = GRAIN_CLIP * footage;
  for (let y = 1; y < h - 1; y++) {
    for (let x = 1; x < w - 1; x++) {
      const i = y * w + x;
      if (skin[i]! <= 0) continue;
      const weight = core(i);
      if (weight <= 0) continue;
      const r = lumaTarget[i]! - median9(lumaTarget, i, w);
      if (Math.abs(r) > clip) continue;
      const d = weight * gain * r;
      warped[3 * i]! += d;
      warped[3 * i + 1]! += d;
      warped[3 * i + 2]! += d;
    }
  }
}

/** The luma of `n` rgb float pixels, in scratch buffer `name`. */
function lumaPlane(rgb: Float32Array, name: string, n: number): Float32Array {
  const luma = scratch(name, n);
  for (let i = 0; i < n; i++) luma[i] = 0.299 * rgb[3 * i]! + 0.587 * rgb[3 * i + 1]! + 0.114 * rgb[3 * i + 2]!;
  return luma;
}

/** The median of the 3x3 neighbourhood of pixel `i` (not on the plane's edge) of a plane `w` wide. */
function median9(plane: Float32Array, i: number, w: number): number {
  let p0 = plane[i - w - 1]!, p1 = plane[i - w]!, p2 = plane[i - w + 1]!;
  let p3 = plane[i - 1]!, p4 = plane[i]!, p5 = plane[i + 1]!;
  let p6 = plane[i + w - 1]!, p7 = plane[i + w]!, p8 = plane[i + w + 1]!;
  let t: number;
  // The 19 exchanges of the classic median-of-9 network (Paeth's): p4 ends as the median. Where only
  // one side of an exchange is read again, only that side is kept.
  if (p1 > p2) { t = p1; p1 = p2; p2 = t; }
  if (p4 > p5) { t = p4; p4 = p5; p5 = t; }
  if (p7 > p8) { t = p7; p7 = p8; p8 = t; }
  if (p0 > p1) { t = p0; p0 = p1; p1 = t; }
  if (p3 > p4) { t = p3; p3 = p4; p4 = t; }
  if (p6 > p7) { t = p6; p6 = p7; p7 = t; }
  if (p1 > p2) { t = p1; p1 = p2; p2 = t; }
  if (p4 > p5) { t = p4; p4 = p5; p5 = t; }
  if (p7 > p8) { t = p7; p7 = p8; p8 = t; }
  if (p0 > p3) { p3 = p0; }
  if (p5 > p8) { p5 = p8; }
  if (p4 > p7) { t = p4; p4 = p7; p7 = t; }
  if (p3 > p6) { p6 = p3; }
  if (p1 > p4) { p4 = p1; }
  if (p2 > p5) { p2 = p5; }
  if (p4 > p7) { p4 = p7; }
  if (p4 > p2) { t = p4; p4 = p2; p2 = t; }
  if (p6 > p4) { p4 = p6; }
  if (p4 > p2) { p4 = p2; }
  return p4;
}

/** Histogram bins for the median of |residual|: GRAIN_BIN wide, the last holding everything past. */
const GRAIN_BIN = 1 / 32;
const GRAIN_BINS = 2048;
/** Fewer skin pixels than this (a face a few pixels wide) give no level. */
const MIN_PIXELS = 200;
/** At most this many pixels of a patch are read for a level (see matchGrain). */
const LEVEL_SAMPLES = 8192;
/**
 * Footage whose grain is below this level (sigma, in luma steps) is left as it is. The test clips made
 * from photos and encoded once read 0.0-1.5 on their faces; the still clip, with sensor noise, 3.1-4.0.
 */
const MIN_LEVEL = 2;
/** Levels over which the grain fades in above MIN_LEVEL: all of it from 3 on. */
const GRAIN_FADE = 1;
/**
 * Residuals past this many times the footage's level are left out, not laid on: a dark spot of
 * make-up or a mole's corner is a mark, which the new face replaces. On the still clip (v2) the judge's
 * marks measure of its painted face read 0.08 with no grain laid on, 0.16 with the residual clipped at
 * 2.5 times the level, and 0.13-0.17 with it left out past 4. The residual's tails are long: left out
 * past 2.5 times, about a tenth of the skin's residuals were, and the new face kept 0.41 of the
 * footage's grain, where past 4 times 3-5 % were and it kept 0.65-0.73.
 */
const GRAIN_CLIP = 4;
