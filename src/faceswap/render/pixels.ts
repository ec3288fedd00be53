import { scratch } from "./scratch.js";

/** The colour toYCbCr last converted, and the one fromYCbCr writes back: one shared triple, no allocation per pixel. */
export const ycbcr: [number, number, number] = [0, 0, 0];

/**
 * Y, Cb and Cr (BT.601, full range) as weights of r, g and b, and what a step of each adds back to r, g
 * and b: the transform toYCbCr and fromYCbCr spell out per pixel, for code that works a plane at a time.
 */
export const YCBCR_OF_RGB: readonly (readonly [number, number, number])[] = [
  [0.299, 0.587, 0.114],
  [-0.168736, -0.331264, 0.5],
  [0.5, -0.418688, -0.081312],
];
export const RGB_OF_YCBCR: readonly (readonly [number, number, number])[] = [
  [1, 1, 1],
  [0, -0.344136, 1.772],
  [1.402, -0.714136, 0],
];

export function toYCbCr(rgb: Float32Array, p: number): void {
  const r = rgb[p]!, g = rgb[p + 1]!, b = rgb[p + 2]!;
  ycbcr[0] = 0.299 * r + 0.587 * g + 0.114 * b;
  ycbcr[1] = -0.168736 * r - 0.331264 * g + 0.5 * b;
  ycbcr[2] = 0.5 * r - 0.418688 * g - 0.081312 * b;
}

export function fromYCbCr(rgb: Float32Array, p: number): void {
  const [y, cb, cr] = ycbcr;
  rgb[p] = y + 1.402 * cr;
  rgb[p + 1] = y - 0.344136 * cb - 0.714136 * cr;
  rgb[p + 2] = y + 1.772 * cb;
}

/** Sets `value` in the patch mask for pixels inside `polygon` (mesh indices, in order) of `mesh`. */
export function fillPolygon(mask: Float32Array, w: number, h: number, mesh: Float32Array, polygon: readonly number[], x0: number, y0: number, value: number): void {
  let minY = Infinity, maxY = -Infinity;
  for (const i of polygon) {
    minY = Math.min(minY, mesh[2 * i + 1]! - y0);
    maxY = Math.max(maxY, mesh[2 * i + 1]! - y0);
  }
  const crossings: number[] = [];
  for (let y = Math.max(0, Math.floor(minY)); y <= Math.min(h - 1, Math.ceil(maxY)); y++) {
    const py = y + 0.5;
    crossings.length = 0;
    for (let k = 0; k < polygon.length; k++) {
      const p = polygon[k]!, q = polygon[(k + 1) % polygon.length]!;
      const ax = mesh[2 * p]! - x0, ay = mesh[2 * p + 1]! - y0, bx = mesh[2 * q]! - x0, by = mesh[2 * q + 1]! - y0;
      if ((ay <= py) !== (by <= py)) crossings.push(ax + ((py - ay) / (by - ay)) * (bx - ax));
    }
    crossings.sort((p, q) => p - q);
    for (let k = 0; k + 1 < crossings.length; k += 2) {
      for (let x = Math.max(0, Math.ceil(crossings[k]! - 0.5)); x <= Math.min(w - 1, Math.floor(crossings[k + 1]! - 0.5)); x++) mask[y * w + x] = value;
    }
  }
}

/**
 * Separable box blur into `out` with running sums (edges clamped), any number of interleaved channels.
 * A fractional `radius` weights the two samples just past its whole part by its fraction: the radii
 * follow the face's size, and rounded they jumped a pixel between frames of a face whose size sat
 * at a step, which showed as the edge's feather and the light field shimmering.
 */
export function boxBlur(input: Float32Array, out: Float32Array, w: number, h: number, channels: number, radius: number): Float32Array {
  const tmp = scratch("blur", input.length);
  blurRows(input, tmp, w, h, channels, radius);
  blurColumns(tmp, out, w, h, channels, radius);
  return out;
}

/** Blurs each row along its length, a channel at a time. */
function blurRows(input: Float32Array, out: Float32Array, w: number, h: number, channels: number, radius: number): void {
  const whole = Math.floor(radius), part = radius - whole;
  const norm = 1 / (2 * whole + 1 + 2 * part);
  const last = w - 1;
  for (let line = 0; line < h; line++) {
    for (let c = 0; c < channels; c++) {
      const base = line * w * channels + c;
      let acc = 0;
      for (let i = -whole; i <= whole; i++) acc += input[base + (i < 0 ? 0 : i > last ? last : i) * channels]!;
      for (let i = 0; i < w; i++) {
        const below = i - whole - 1, above = i + whole + 1, drop = i - whole;
        const next = input[base + (above > last ? last : above) * channels]!;
        out[base + i * channels] = (acc + part * (input[base + (below < 0 ? 0 : below) * channels]! + next)) * norm;
        acc += next - input[base + (drop < 0 ? 0 : drop) * channels]!;
      }
    }
  }
}

/** blurColumns' running sums, in double precision as a lone sum would be. */
let runningSums = new Float64Array(0);

function sums(length: number): Float64Array {
  if (runningSums.length < length) runningSums = new Float64Array(length);
  return runningSums;
}

/**
 * Blurs each column down its length, a row at a time with a running sum per column: walking each
 * column by itself strode a row's width between reads (the blur was the renderer's largest
 * JavaScript cost, 12 % of a worker). Each sum takes the same values in the same order as a walk
 * down its column would, so the results are the same to the bit.
 */
function blurColumns(input: Float32Array, out: Float32Array, w: number, h: number, channels: number, radius: number): void {
  const whole = Math.floor(radius), part = radius - whole;
  const norm = 1 / (2 * whole + 1 + 2 * part);
  const last = h - 1;
  const row = w * channels;
  const acc = sums(row).fill(0, 0, row);
  for (let i = -whole; i <= whole; i++) {
    const at = (i < 0 ? 0 : i > last ? last : i) * row;
    for (let k = 0; k < row; k++) acc[k]! += input[at + k]!;
  }
  for (let i = 0; i < h; i++) {
    const below = i - whole - 1, above = i + whole + 1, drop = i - whole;
    const belowAt = (below < 0 ? 0 : below) * row, aboveAt = (above > last ? last : above) * row, dropAt = (drop < 0 ? 0 : drop) * row;
    const outAt = i * row;
    for (let k = 0; k < row; k++) {
      const next = input[aboveAt + k]!;
      out[outAt + k] = (acc[k]! + part * (input[belowAt + k]! + next)) * norm;
      acc[k]! += next - input[dropAt + k]!;
    }
  }
}

/** Turns a median absolute deviation into a normal distribution's sigma. */
export const MAD_TO_SD = 1.4826;

/**
 * The bin of `histogram[start, start + bins)` that holds the middle of its `count` values: the index of
 * the first bin, counted from `start`, by which half of them have been seen.
 */
export function middleBin(histogram: Float32Array, start: number, bins: number, count: number): number {
  let seen = 0;
  for (let b = 0; b < bins; b++) {
    seen += histogram[start + b]!;
    if (seen * 2 >= count) return b;
  }
  return bins - 1;
}

/** A copy of `mesh` with the points of `polygon` moved out from their centre by `margin` of their distance. */
export function grownPolygon(mesh: Float32Array, polygon: readonly number[], margin: number): Float32Array {
  let cx = 0, cy = 0;
  for (const i of polygon) {
    cx += mesh[2 * i]! / polygon.length;
    cy += mesh[2 * i + 1]! / polygon.length;
  }
  const out = Float32Array.from(mesh);
  for (const i of polygon) {
    out[2 * i] = cx + (mesh[2 * i]! - cx) * (1 + margin);
    out[2 * i + 1] = cy + (mesh[2 * i + 1]! - cy) * (1 + margin);
  }
  return out;
}

/** Bounding box of points stored as x, y pairs. */
export function pointBounds(points: ArrayLike<number>): { minX: number; minY: number; maxX: number; maxY: number } {
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (let k = 0; k < points.length; k += 2) {
    minX = Math.min(minX, points[k]!); maxX = Math.max(maxX, points[k]!);
    minY = Math.min(minY, points[k + 1]!); maxY = Math.max(maxY, points[k + 1]!);
  }
  return { minX, minY, maxX, maxY };
}

/**
 * The rgb24 image `src` (bicubic, see sampleCubic) at the point of barycentric weights (wa, wb, wc) in
 * the triangle whose corners are `corners` (x, y pairs, pixel centres at .5), into `out` at `o`.
 */
export function sampleTriangle(src: Uint8Array, sw: number, sh: number, corners: Float64Array, wa: number, wb: number, wc: number, out: Float32Array, o: number): void {
  const sx = Math.min(sw - 1.001, Math.max(0, wa * corners[0]! + wb * corners[2]! + wc * corners[4]! - 0.5));
  const sy = Math.min(sh - 1.001, Math.max(0, wa * corners[1]! + wb * corners[3]! + wc * corners[5]! - 0.5));
  sampleCubic(src, sw, sh, sx, sy, out, o);
}

/** The four-channel field at (sx, sy), bilinearly (edges clamped), into `out` at `o`. */
export function sampleField(field: Float32Array, w: number, h: number, sx: number, sy: number, out: Float32Array, o: number): void {
  const x = Math.min(w - 1.001, Math.max(0, sx)), y = Math.min(h - 1.001, Math.max(0, sy));
  const ix = Math.floor(x), iy = Math.floor(y), fx = x - ix, fy = y - iy;
  const p = (iy * w + ix) * 4, q = p + w * 4;
  for (let c = 0; c < 4; c++) {
    const top = field[p + c]! + fx * (field[p + 4 + c]! - field[p + c]!);
    const bottom = field[q + c]! + fx * (field[q + 4 + c]! - field[q + c]!);
    out[o + c] = top + fy * (bottom - top);
  }
}

const cubicX = new Float32Array(4), cubicY = new Float32Array(4);

/** Catmull-Rom weights of the 4 samples around a point at `t` (0..1) past the second. */
function cubicWeights(t: number, out: Float32Array): void {
  const t2 = t * t, t3 = t2 * t;
  out[0] = 0.5 * (-t3 + 2 * t2 - t);
  out[1] = 0.5 * (3 * t3 - 5 * t2 + 2);
  out[2] = 0.5 * (-3 * t3 + 4 * t2 + t);
  out[3] = 0.5 * (t3 - t2);
}

/**
 * The rgb24 image `src` at (sx, sy) by Catmull-Rom interpolation (edges clamped) into `out` at `o`:
 * bilinear sampling halves the contrast of detail a pixel wide wherever a sample falls between
 * texels, and the new face came out softer than the frame around it.
 */
export function sampleCubic(src: Uint8Array, sw: number, sh: number, sx: number, sy: number, out: Float32Array, o: number): void {
  const ix = Math.floor(sx), iy = Math.floor(sy);
  cubicWeights(sx - ix, cubicX);
  cubicWeights(sy - iy, cubicY);
  let r = 0, g = 0, b = 0;
  for (let j = 0; j < 4; j++) {
    const y = Math.min(sh - 1, Math.max(0, iy - 1 + j));
    let rr = 0, gg = 0, bb = 0;
    for (let k = 0; k < 4; k++) {
      const p = (y * sw + Math.min(sw - 1, Math.max(0, ix - 1 + k))) * 3, wk = cubicX[k]!;
      rr += src[p]! * wk;
      gg += src[p + 1]! * wk;
      bb += src[p + 2]! * wk;
    }
    const wj = cubicY[j]!;
    r += rr * wj;
    g += gg * wj;
    b += bb * wj;
  }
  out[o] = r;
  out[o + 1] = g;
  out[o + 2] = b;
}
