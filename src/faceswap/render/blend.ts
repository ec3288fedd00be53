import { pushPull } from "./push-pull.js";
import { scratch } from "./scratch.js";

/**
 * Multi-band blend (Burt and Adelson's Laplacian pyramid) of `over` onto `under`, rgb floats over
 * w x h, into `under`. Each band of the difference `over - under` is laid on with the mask `weight`
 * blurred to that band's scale: fine detail changes over a few pixels, the colour and light of the
 * coarse bands over a band as wide as they are, so neither a seam nor a colour step shows. `under`
 * changes only where `support` (0..1) is above 0: the coarse masks reach past the face, the blend does not.
 * `hole` is 1 where the face is but `support` is not (a hand in front of it): see below.
 */
export function pyramidBlend(
  under: Float32Array,
  over: Float32Array,
  weight: Float32Array,
  support: Float32Array,
  hole: Float32Array,
  w: number,
  h: number,
): void {
  const levels: Array<{ diff: Float32Array; mask: Float32Array; w: number; h: number }> = [];
  // Past the support `over` is undefined; its difference there would ring into the face's bands, so
  // it is 0, except on `hole`, where it is filled from the support around it: left at 0 there, the
  // coarse bands beside a hole in the face (a hand in front of it) mixed that 0 in, and the face beside
  // the hand kept the target's low frequencies in blotches.
  const filled = scratch("blendFill", w * h * 4);
  for (let i = 0; i < w * h; i++) {
    const s = support[i]! > 0 ? 1 : 0;
    for (let c = 0; c < 3; c++) filled[i * 4 + c] = s * (over[i * 3 + c]! - under[i * 3 + c]!);
    filled[i * 4 + 3] = s > 0 || hole[i]! === 0 ? 1 : 0;
  }
  pushPull(filled, w, h);
  const diff = scratch("blendDiff0", w * h * 3);
  for (let i = 0; i < w * h; i++) for (let c = 0; c < 3; c++) diff[i * 3 + c] = filled[i * 4 + c]!;
  levels.push({ diff, mask: weight, w, h });
  while (levels.length < MAX_LEVELS && Math.min(levels.at(-1)!.w, levels.at(-1)!.h) >= 2 * MIN_SIDE) {
    const fine = levels.at(-1)!, k = levels.length;
    levels.push({
      diff: reduce(fine.diff, fine.w, fine.h, 3, `blendDiff${k}`),
      mask: reduce(fine.mask, fine.w, fine.h, 1, `blendMask${k}`),
      w: (fine.w + 1) >> 1,
      h: (fine.h + 1) >> 1,
    });
  }
  // Each level's band is its Gaussian level less the next one expanded; blending band by band and
  // collapsing is the same as carrying the blended coarser result up and adding each masked band.
  let result = scratch(`blendUp${levels.length - 1}`, levels.at(-1)!.w * levels.at(-1)!.h * 3);
  {
    const top = levels.at(-1)!;
    for (let i = 0; i < top.w * top.h; i++) for (let c = 0; c < 3; c++) result[i * 3 + c] = top.mask[i]! * top.diff[i * 3 + c]!;
  }
  for (let l = levels.length - 2; l >= 0; l--) {
    const fine = levels[l]!, coarse = levels[l + 1]!;
    const upDiff = expand(coarse.diff, coarse.w, coarse.h, fine.w, fine.h, `blendExpand${l}`);
    const upResult = expand(result, coarse.w, coarse.h, fine.w, fine.h, `blendUp${l}`);
    for (let i = 0; i < fine.w * fine.h; i++) {
      const m = fine.mask[i]!;
      for (let c = 0; c < 3; c++) {
        const p = i * 3 + c;
        upResult[p] = upResult[p]! + m * (fine.diff[p]! - upDiff[p]!);
      }
    }
    result = upResult;
  }
  for (let i = 0; i < w * h; i++) {
    const s = support[i]!;
    if (s <= 0) continue;
    for (let c = 0; c < 3; c++) under[i * 3 + c]! += s * result[i * 3 + c]!;
  }
}

// Levels stop at this many, or when the next would be narrower than MIN_SIDE pixels: bands coarser
// than about a sixth of the face are the relight's, already the target's.
const MAX_LEVELS = 5;
const MIN_SIDE = 6;

/** Blurs with the binomial kernel [1 4 6 4 1] / 16 (edges clamped) and keeps every second sample. */
function reduce(input: Float32Array, w: number, h: number, channels: number, name: string): Float32Array {
  const cw = (w + 1) >> 1, ch = (h + 1) >> 1;
  const rows = scratch(`${name}Rows`, cw * h * channels);
  // The five clamped taps of each output column (and below, of each row), found once rather than per sample.
  const taps = (k: number, last: number, stride: number) => Math.min(last, Math.max(0, k)) * stride;
  const columns = new Int32Array(cw * 5);
  for (let x = 0; x < cw; x++) for (let k = 0; k < 5; k++) columns[5 * x + k] = taps(2 * x + k - 2, w - 1, channels);
  for (let y = 0; y < h; y++) {
    const from = y * w * channels;
    for (let x = 0; x < cw; x++) {
      const to = (y * cw + x) * channels;
      const t0 = columns[5 * x]!, t1 = columns[5 * x + 1]!, t2 = columns[5 * x + 2]!, t3 = columns[5 * x + 3]!, t4 = columns[5 * x + 4]!;
      for (let c = 0; c < channels; c++) {
        const at = from + c;
        rows[to + c] = (input[at + t0]! + 4 * input[at + t1]! + 6 * input[at + t2]! + 4 * input[at + t3]! + input[at + t4]!) / 16;
      }
    }
  }
  const out = scratch(name, cw * ch * channels);
  const row = cw * channels;
  for (let y = 0; y < ch; y++) {
    const sy = 2 * y;
    const t0 = taps(sy - 2, h - 1, row), t1 = taps(sy - 1, h - 1, row), t2 = taps(sy, h - 1, row);
    const t3 = taps(sy + 1, h - 1, row), t4 = taps(sy + 2, h - 1, row);
    for (let k = 0; k < row; k++) {
      out[y * row + k] = (rows[t0 + k]! + 4 * rows[t1 + k]! + 6 * rows[t2 + k]! + 4 * rows[t3 + k]! + rows[t4 + k]!) / 16;
    }
  }
  return out;
}

/** Bilinear upsampling of a reduced level (rgb) back to w x h; sample i of it sits at 2i. */
function expand(input: Float32Array, cw: number, ch: number, w: number, h: number, name: string): Float32Array {
  const out = scratch(name, w * h * 3);
  // Each column's two samples and the weight between them, the same on every row.
  const left = new Int32Array(w), right = new Int32Array(w), across = new Float64Array(w);
  for (let x = 0; x < w; x++) {
    const fx = x / 2, ix = Math.min(cw - 1, Math.floor(fx));
    left[x] = ix * 3;
    right[x] = Math.min(cw - 1, ix + 1) * 3;
    across[x] = fx - ix;
  }
  for (let y = 0; y < h; y++) {
    const fy = y / 2, iy = Math.min(ch - 1, Math.floor(fy)), iy1 = Math.min(ch - 1, iy + 1), ty = fy - iy;
    const upper = iy * cw * 3, lower = iy1 * cw * 3;
    for (let x = 0; x < w; x++) {
      const tx = across[x]!;
      const a = upper + left[x]!, b = upper + right[x]!, c = lower + left[x]!, d = lower + right[x]!;
      for (let k = 0; k < 3; k++) {
        const top = input[a + k]! + (input[b + k]! - input[a + k]!) * tx;
        const bottom = input[c + k]! + (input[d + k]! - input[c + k]!) * tx;
        out[(y * w + x) * 3 + k] = top + (bottom - top) * ty;
      }
    }
  }
  return out;
}
