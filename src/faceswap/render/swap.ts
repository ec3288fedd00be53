import type { StyleVersion } from "../renderer.js";
import { fitSimilarity } from "./similarity.js";

/** The replacement face: an rgb24 crop around it and its mesh (x, y pairs) in crop pixels. */
export interface SourceFace {
  pixels: Uint8Array;
  width: number;
  height: number;
  mesh: Float32Array;
}

export interface StyleParams {
  /** Peak opacity of the warped face over the target. */
  opacity: number;
  /** How far the warped face's mean Y/Cb/Cr moves to the target's (0..1). */
  meanTransfer: number;
  /** How far its contrast (std) moves to the target's (0..1). */
  stdTransfer: number;
  /** Unsharp-mask amount on the warped face (0 = off). */
  sharpen: number;
  /** Share of the target's own fine detail (high-pass) kept on top of the new face. */
  keepTexture: number;
  /** How far the warped face's local chroma (blurred over `chromaRadius`) moves to the target's (0..1). */
  chromaTransfer: number;
  /** Blur radius of that local chroma as a share of the face's size. */
  chromaRadius: number;
  /** Feather width of the mask edge as a share of the face's size. */
  feather: number;
  /** How far the target's inner landmarks move to the source's proportions (0 = target geometry); its expression stays. */
  reshape: number;
}

/**
 * v1 blends: the target's skin tone and contrast are taken over completely (mean and std in YCbCr),
 * 15 % of its fine texture stays on top, the inner features move 60 % of the way to the source's
 * proportions, and the face is laid at 95 % opacity with a wide feather (8 % of the face size), so
 * the result sits in the footage. v2 replaces: full opacity, the mean colour moves 60 % and then the
 * local chroma (blurred over a tenth of the face) 60 % of what is left, so a coloured light on the
 * source photo fades without touching its luminance and contrast; an unsharp mask (amount 0.8, 3x3)
 * restores detail the warp softened, the features take the source's proportions fully, and a narrow
 * feather (3 %) keeps the new face's edges. Moving v2's colour further (mean 0.9 and std 0.5, or the
 * local chroma all the way) makes the face-recognition embedding, which sees colour, fall back towards
 * the original person's.
 */
export const STYLES: Record<StyleVersion, StyleParams> = {
  v1: {
    opacity: 0.95, meanTransfer: 1, stdTransfer: 1, chromaTransfer: 0, chromaRadius: 0.1, sharpen: 0, keepTexture: 0.15,
    feather: 0.08, reshape: 0.6,
  },
  v2: {
    opacity: 1, meanTransfer: 0.6, stdTransfer: 0, chromaTransfer: 0.6, chromaRadius: 0.1, sharpen: 0.8, keepTexture: 0,
    feather: 0.03, reshape: 1,
  },
};

const MAX_FEATHER = Math.max(...Object.values(STYLES).map((style) => style.feather));

// Per-frame buffers are reused (grown as needed): allocating them for every face made the garbage
// collector the largest cost of a swap. A view holds the previous face's values: a caller that does not
// write every element zeroes it first.
const scratchBuffers = new Map<string, Float32Array>();

function scratch(name: string, length: number): Float32Array {
  let buffer = scratchBuffers.get(name);
  if (!buffer || buffer.length < length) scratchBuffers.set(name, (buffer = new Float32Array(length * 1.25)));
  return buffer.subarray(0, length);
}

// The face outline (MediaPipe FACE_OVAL, in order around the face) stays where the target's is, so the
// blend edge follows the target's head; only the features inside take the source's proportions.
export const OVAL = [
  10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152, 148, 176, 149, 150,
  136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
];
const FACE_OVAL = new Set(OVAL);

// The points of MediaPipe's FACEMESH_LIPS, _RIGHT_EYE, _LEFT_EYE, _RIGHT_EYEBROW, _LEFT_EYEBROW and
// _NOSE connections. Each feature moves as one piece, see `reshape`; the mouth and the eyes open and
// close, so they are scaled only along the line through their `corners`.
interface Feature {
  points: readonly number[];
  corners?: readonly [number, number];
}

const FEATURES: readonly Feature[] = [
  {
    points: [
      61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 185, 40, 39, 37, 0, 267, 269, 270, 409, 78, 95, 88, 178, 87, 14,
      317, 402, 318, 324, 308, 191, 80, 81, 82, 13, 312, 311, 310, 415,
    ],
    corners: [61, 291],
  },
  { points: [33, 7, 163, 144, 145, 153, 154, 155, 133, 246, 161, 160, 159, 158, 157, 173], corners: [33, 133] },
  { points: [263, 249, 390, 373, 374, 380, 381, 382, 362, 466, 388, 387, 386, 385, 384, 398], corners: [263, 362] },
  { points: [46, 53, 52, 65, 55, 70, 63, 105, 66, 107] },
  { points: [276, 283, 282, 295, 285, 300, 293, 334, 296, 336] },
  { points: [168, 6, 197, 195, 5, 4, 1, 19, 94, 2, 98, 97, 326, 327, 294, 278, 344, 440, 275, 45, 220, 115, 48, 64] },
];
const IN_FEATURE = new Set(FEATURES.flatMap((feature) => feature.points));

/**
 * The target mesh with its inner points moved `amount` of the way to the source's proportions: the
 * source is laid over `neutral` (the target person's mean shape laid over this frame's face) by the
 * best similarity transform (least squares: rotation, scale, shift); each feature (lips, eyes, brows,
 * nose) then takes the similarity transform from its shape in `neutral` to its shape in the source
 * (the mouth and eyes scaled along their width only), applied to where it is this frame, and the points between the features move by the source's
 * difference from `neutral`. Moving the points to the source's fixed shape instead would erase what
 * the target's mesh does this frame and its mean does not: the mouth opening, the eyes closing. Moving
 * the features' points one by one as well would add the source's lip gap less the mean's, which
 * crosses the lips of a closed mouth when the mean has them parted (a person who talks).
 */
export function reshape(target: Float32Array, neutral: Float32Array, source: Float32Array, amount: number): Float32Array {
  if (amount <= 0) return target;
  const fit = fitSimilarity(source, neutral);
  const laid = new Float32Array(source.length);
  for (let i = 0; i < laid.length; i += 2) {
    laid[i] = fit.x(source[i]!, source[i + 1]!);
    laid[i + 1] = fit.y(source[i]!, source[i + 1]!);
  }
  const out = Float32Array.from(target);
  for (let i = 0; i < out.length / 2; i++) {
    if (FACE_OVAL.has(i) || IN_FEATURE.has(i)) continue;
    out[2 * i]! += amount * (laid[2 * i]! - neutral[2 * i]!);
    out[2 * i + 1]! += amount * (laid[2 * i + 1]! - neutral[2 * i + 1]!);
  }
  for (const { points, corners } of FEATURES) {
    const change = fitSimilarity(gather(neutral, points), gather(laid, points));
    const scale = Math.hypot(change.cos, change.sin);
    const cos = change.cos / scale, sin = change.sin / scale;
    // Scaling across the mouth or an eye would scale how far it is open this frame too.
    let ux = 0, uy = 0;
    if (corners) {
      const [left, right] = corners;
      const dx = target[2 * right]! - target[2 * left]!, dy = target[2 * right + 1]! - target[2 * left + 1]!;
      const length = Math.hypot(dx, dy) || 1;
      ux = (cos * dx - sin * dy) / length;
      uy = (sin * dx + cos * dy) / length;
    }
    for (const i of points) {
      const x = target[2 * i]!, y = target[2 * i + 1]!;
      let dx = cos * (x - change.fromX) - sin * (y - change.fromY);
      let dy = sin * (x - change.fromX) + cos * (y - change.fromY);
      if (corners) {
        const along = (scale - 1) * (dx * ux + dy * uy);
        dx += along * ux;
        dy += along * uy;
      } else {
        dx *= scale;
        dy *= scale;
      }
      out[2 * i] = x + amount * (change.toX + dx - x);
      out[2 * i + 1] = y + amount * (change.toY + dy - y);
    }
  }
  return out;
}

function gather(mesh: Float32Array, indices: readonly number[]): Float32Array {
  const out = new Float32Array(indices.length * 2);
  indices.forEach((index, i) => {
    out[2 * i] = mesh[2 * index]!;
    out[2 * i + 1] = mesh[2 * index + 1]!;
  });
  return out;
}

/** Region of the frame the face is drawn in, and the buffers over it. */
interface Patch {
  x0: number;
  y0: number;
  w: number;
  h: number;
  /** Geometric mean of the mesh's width and height, pixels. */
  faceSize: number;
  /** Warped source, rgb floats. */
  warped: Float32Array;
  /** 1 where a triangle of the mesh covers the pixel. */
  covered: Float32Array;
}

/**
 * Draws `source` onto the face whose mesh is `target` (x, y pairs in frame pixels; `neutral` is its
 * track's mean shape over the same face, see `reshape`) in the rgb24 `frame`, in place: each mesh
 * triangle is affine-warped from the source, the result is colour-matched to the target's skin in
 * YCbCr and blended through a feathered mask.
 */
export function swapFace(
  frame: Uint8Array,
  width: number,
  height: number,
  target: Float32Array,
  neutral: Float32Array,
  source: SourceFace,
  triangles: ArrayLike<number>,
  style: StyleParams,
): void {
  const patch = warpTriangles(width, height, reshape(target, neutral, source.mesh, style.reshape), source, triangles);
  if (!patch) return;
  const { x0, y0, w, h, faceSize, warped, covered } = patch;
  const targetPatch = scratch("target", w * h * 3);
  for (let y = 0; y < h; y++) {
    const row = ((y0 + y) * width + x0) * 3;
    for (let i = 0; i < w * 3; i++) targetPatch[y * w * 3 + i] = frame[row + i]!;
  }
  transferColour(warped, targetPatch, covered, style);
  if (style.chromaTransfer > 0) {
    transferChroma(warped, targetPatch, covered, w, h, style.chromaTransfer, Math.max(1, Math.round(style.chromaRadius * faceSize)));
  }
  if (style.sharpen > 0) addDetail(warped, warped, w, h, style.sharpen, 1);
  if (style.keepTexture > 0) addDetail(warped, targetPatch, w, h, style.keepTexture, Math.max(1, Math.round(faceSize / 80)));
  const alpha = featherMask(covered, w, h, Math.max(2, Math.round(style.feather * faceSize)));
  for (let y = 0; y < h; y++) {
    const row = ((y0 + y) * width + x0) * 3;
    for (let x = 0; x < w; x++) {
      const a = alpha[y * w + x]! * style.opacity;
      if (a <= 0) continue;
      const p = (y * w + x) * 3;
      for (let c = 0; c < 3; c++) {
        const v = targetPatch[p + c]! * (1 - a) + warped[p + c]! * a;
        frame[row + x * 3 + c] = v < 0 ? 0 : v > 255 ? 255 : v + 0.5;
      }
    }
  }
}

function warpTriangles(
  width: number,
  height: number,
  target: Float32Array,
  source: SourceFace,
  triangles: ArrayLike<number>,
): Patch | undefined {
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (let i = 0; i < target.length; i += 2) {
    minX = Math.min(minX, target[i]!);
    maxX = Math.max(maxX, target[i]!);
    minY = Math.min(minY, target[i + 1]!);
    maxY = Math.max(maxY, target[i + 1]!);
  }
  const faceSize = Math.sqrt((maxX - minX) * (maxY - minY));
  // Room outside the outline so the feather blur sees uncovered pixels there.
  const pad = Math.ceil(MAX_FEATHER * faceSize) * 2 + 2;
  const x0 = Math.max(0, Math.floor(minX) - pad);
  const y0 = Math.max(0, Math.floor(minY) - pad);
  const x1 = Math.min(width, Math.ceil(maxX) + pad);
  const y1 = Math.min(height, Math.ceil(maxY) + pad);
  const w = x1 - x0;
  const h = y1 - y0;
  if (w < 8 || h < 8) return undefined;
  const warped = scratch("warped", w * h * 3).fill(0);
  const covered = scratch("covered", w * h).fill(0);
  let sminX = Infinity, sminY = Infinity, smaxX = -Infinity, smaxY = -Infinity;
  for (let i = 0; i < source.mesh.length; i += 2) {
    sminX = Math.min(sminX, source.mesh[i]!);
    smaxX = Math.max(smaxX, source.mesh[i]!);
    sminY = Math.min(sminY, source.mesh[i + 1]!);
    smaxY = Math.max(smaxY, source.mesh[i + 1]!);
  }
  const levels = pyramid(source);
  const sampled = insetMesh(source);
  const level = Math.max(0, Math.min(levels.length - 1, Math.floor(Math.log2(Math.sqrt((smaxX - sminX) * (smaxY - sminY)) / faceSize))));
  const { pixels: src, width: sw, height: sh } = levels[level]!;
  const unit = 1 / 2 ** level;
  for (let t = 0; t + 2 < triangles.length; t += 3) {
    const a = triangles[t]! * 2, b = triangles[t + 1]! * 2, c = triangles[t + 2]! * 2;
    const ax = target[a]! - x0, ay = target[a + 1]! - y0;
    const bx = target[b]! - x0, by = target[b + 1]! - y0;
    const cx = target[c]! - x0, cy = target[c + 1]! - y0;
    const area = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax);
    const sourceArea =
      (source.mesh[b]! - source.mesh[a]!) * (source.mesh[c + 1]! - source.mesh[a + 1]!) -
      (source.mesh[b + 1]! - source.mesh[a + 1]!) * (source.mesh[c]! - source.mesh[a]!);
    const sax = sampled[a]! * unit, say = sampled[a + 1]! * unit;
    const sbx = sampled[b]! * unit, sby = sampled[b + 1]! * unit;
    const scx = sampled[c]! * unit, scy = sampled[c + 1]! * unit;
    // A triangle that turned over faces away from the camera (head turned); its far side is hidden.
    if (Math.abs(area) < 1e-3 || area * sourceArea <= 0) continue;
    // Barycentric weights of a target pixel give its source position.
    const inv = 1 / area;
    const tx0 = Math.max(0, Math.floor(Math.min(ax, bx, cx)));
    const tx1 = Math.min(w - 1, Math.ceil(Math.max(ax, bx, cx)));
    const ty0 = Math.max(0, Math.floor(Math.min(ay, by, cy)));
    const ty1 = Math.min(h - 1, Math.ceil(Math.max(ay, by, cy)));
    // A small tolerance closes hairline cracks between neighbouring triangles.
    const eps = -0.02;
    for (let y = ty0; y <= ty1; y++) {
      const py = y + 0.5;
      for (let x = tx0; x <= tx1; x++) {
        const px = x + 0.5;
        const wa = ((bx - px) * (cy - py) - (by - py) * (cx - px)) * inv;
        const wb = ((cx - px) * (ay - py) - (cy - py) * (ax - px)) * inv;
        const wc = 1 - wa - wb;
        if (wa < eps || wb < eps || wc < eps) continue;
        const sx = Math.min(sw - 1.001, Math.max(0, wa * sax + wb * sbx + wc * scx - 0.5));
        const sy = Math.min(sh - 1.001, Math.max(0, wa * say + wb * sby + wc * scy - 0.5));
        const ix = sx | 0, iy = sy | 0;
        const fx = sx - ix, fy = sy - iy;
        const p00 = (iy * sw + ix) * 3, p01 = p00 + 3, p10 = p00 + sw * 3, p11 = p10 + 3;
        const o = (y * w + x) * 3;
        for (let ch = 0; ch < 3; ch++) {
          const top = src[p00 + ch]! + (src[p01 + ch]! - src[p00 + ch]!) * fx;
          const bottom = src[p10 + ch]! + (src[p11 + ch]! - src[p10 + ch]!) * fx;
          warped[o + ch] = top + (bottom - top) * fy;
        }
        covered[y * w + x] = 1;
      }
    }
  }
  return { x0, y0, w, h, faceSize, warped, covered };
}

// The source's outline and, where its head is turned, the points beyond it lie on or past the edge of
// its skin; sampled as they are, they bring the hair and background behind the face into the new face
// as speckles (which v2's unsharp mask sharpens further). Each point is sampled no further out from
// the outline's centre than this share of the way to the outline.
const SOURCE_INSET = 0.9;
const insetMeshes = new WeakMap<SourceFace, Float32Array>();

function insetMesh(source: SourceFace): Float32Array {
  let inset = insetMeshes.get(source);
  if (inset) return inset;
  const { mesh } = source;
  inset = Float32Array.from(mesh);
  let cx = 0, cy = 0;
  for (const i of OVAL) {
    cx += mesh[2 * i]! / OVAL.length;
    cy += mesh[2 * i + 1]! / OVAL.length;
  }
  for (let i = 0; i < mesh.length; i += 2) {
    const dx = mesh[i]! - cx, dy = mesh[i + 1]! - cy;
    // Where the ray from the centre through the point leaves the outline, in units of (dx, dy).
    let exit = Infinity;
    for (let k = 0; k < OVAL.length; k++) {
      const p = OVAL[k]!, q = OVAL[(k + 1) % OVAL.length]!;
      const ax = mesh[2 * p]! - cx, ay = mesh[2 * p + 1]! - cy;
      const ex = mesh[2 * q]! - cx - ax, ey = mesh[2 * q + 1]! - cy - ay;
      const det = dx * ey - dy * ex;
      if (Math.abs(det) < 1e-9) continue;
      const t = (ax * ey - ay * ex) / det;
      const u = (ax * dy - ay * dx) / det;
      if (t > 0 && u >= 0 && u <= 1) exit = Math.min(exit, t);
    }
    const limit = SOURCE_INSET * exit;
    if (limit >= 1) continue;
    inset[i] = cx + dx * limit;
    inset[i + 1] = cy + dy * limit;
  }
  insetMeshes.set(source, inset);
  return inset;
}

interface Level {
  pixels: Uint8Array;
  width: number;
  height: number;
}

// Faces in footage are often several times smaller than the source photo's; sampling it directly
// aliases its fine texture into noise, so each source keeps halvings to sample from instead.
const pyramids = new WeakMap<SourceFace, Level[]>();

function pyramid(source: SourceFace): Level[] {
  let levels = pyramids.get(source);
  if (levels) return levels;
  levels = [{ pixels: source.pixels, width: source.width, height: source.height }];
  for (let top = levels[0]!; top.width >= 32 && top.height >= 32; top = levels.at(-1)!) {
    const width = top.width >> 1, height = top.height >> 1;
    const pixels = new Uint8Array(width * height * 3);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const p = (2 * y * top.width + 2 * x) * 3, q = p + top.width * 3;
        for (let c = 0; c < 3; c++) {
          pixels[(y * width + x) * 3 + c] = (top.pixels[p + c]! + top.pixels[p + 3 + c]! + top.pixels[q + c]! + top.pixels[q + 3 + c]! + 2) >> 2;
        }
      }
    }
    levels.push({ pixels, width, height });
  }
  pyramids.set(source, levels);
  return levels;
}

/** Mean/std transfer of the warped face towards the target, per YCbCr channel, over covered pixels. */
function transferColour(warped: Float32Array, target: Float32Array, covered: Float32Array, style: StyleParams): void {
  const sum = new Float64Array(12);
  let n = 0;
  for (let i = 0; i < covered.length; i++) {
    if (covered[i] === 0) continue;
    n++;
    toYCbCr(warped, i * 3);
    const [wy, wcb, wcr] = ycbcr;
    toYCbCr(target, i * 3);
    const [ty, tcb, tcr] = ycbcr;
    sum[0]! += wy; sum[1]! += wcb; sum[2]! += wcr;
    sum[3]! += wy * wy; sum[4]! += wcb * wcb; sum[5]! += wcr * wcr;
    sum[6]! += ty; sum[7]! += tcb; sum[8]! += tcr;
    sum[9]! += ty * ty; sum[10]! += tcb * tcb; sum[11]! += tcr * tcr;
  }
  if (n < 16) return;
  const shift = [0, 0, 0];
  const scale = [1, 1, 1];
  const mean = [0, 0, 0];
  for (let c = 0; c < 3; c++) {
    const ms = sum[c]! / n, mt = sum[6 + c]! / n;
    const ss = Math.sqrt(Math.max(1, sum[3 + c]! / n - ms * ms));
    const st = Math.sqrt(Math.max(1, sum[9 + c]! / n - mt * mt));
    mean[c] = ms;
    scale[c] = 1 + style.stdTransfer * (Math.min(3, st / ss) - 1);
    shift[c] = style.meanTransfer * (mt - ms);
  }
  for (let i = 0; i < covered.length; i++) {
    if (covered[i] === 0) continue;
    toYCbCr(warped, i * 3);
    for (let c = 0; c < 3; c++) ycbcr[c] = (ycbcr[c]! - mean[c]!) * scale[c]! + mean[c]! + shift[c]!;
    fromYCbCr(warped, i * 3);
  }
}

const ycbcr: [number, number, number] = [0, 0, 0];

/**
 * Moves the warped face's chroma towards the target's, pixel by pixel, by the difference of their
 * chroma blurred over `radius` (each averaged over covered pixels only, so hair and background around
 * the face do not count). A coloured light on the source photo (one cheek orange, the other blue)
 * varies across the face, which one mean shift cannot undo; the blurred difference does, while the
 * source's luminance, which carries most of its identity, stays.
 */
function transferChroma(warped: Float32Array, target: Float32Array, covered: Float32Array, w: number, h: number, amount: number, radius: number): void {
  const n = w * h;
  const packed = scratch("chroma", n * 5).fill(0);
  for (let i = 0; i < n; i++) {
    if (covered[i] === 0) continue;
    toYCbCr(warped, i * 3);
    packed[i * 5] = ycbcr[1];
    packed[i * 5 + 1] = ycbcr[2];
    toYCbCr(target, i * 3);
    packed[i * 5 + 2] = ycbcr[1];
    packed[i * 5 + 3] = ycbcr[2];
    packed[i * 5 + 4] = 1;
  }
  // Two box passes approach a Gaussian; one leaves visible steps where the face's edge enters the box.
  const field = boxBlur(boxBlur(packed, scratch("chroma1", n * 5), w, h, 5, radius), packed, w, h, 5, radius);
  for (let i = 0; i < n; i++) {
    if (covered[i] === 0) continue;
    const weight = amount / field[i * 5 + 4]!;
    toYCbCr(warped, i * 3);
    ycbcr[1] += (field[i * 5 + 2]! - field[i * 5]!) * weight;
    ycbcr[2] += (field[i * 5 + 3]! - field[i * 5 + 1]!) * weight;
    fromYCbCr(warped, i * 3);
  }
}

function toYCbCr(rgb: Float32Array, p: number): void {
  const r = rgb[p]!, g = rgb[p + 1]!, b = rgb[p + 2]!;
  ycbcr[0] = 0.299 * r + 0.587 * g + 0.114 * b;
  ycbcr[1] = -0.168736 * r - 0.331264 * g + 0.5 * b;
  ycbcr[2] = 0.5 * r - 0.418688 * g - 0.081312 * b;
}

function fromYCbCr(rgb: Float32Array, p: number): void {
  const [y, cb, cr] = ycbcr;
  rgb[p] = y + 1.402 * cr;
  rgb[p + 1] = y - 0.344136 * cb - 0.714136 * cr;
  rgb[p + 2] = y + 1.772 * cb;
}

/** Adds `amount` times the high-pass of `from` (itself minus its box blur of `radius`) to `to`. */
function addDetail(to: Float32Array, from: Float32Array, w: number, h: number, amount: number, radius: number): void {
  const blurred = boxBlur(from, scratch("detail", from.length), w, h, 3, radius);
  for (let i = 0; i < to.length; i++) to[i]! += amount * (from[i]! - blurred[i]!);
}

/**
 * Opacity from the covered area: blurred twice, then only its inner half kept, so the face fades in
 * over `radius` pixels inside its outline and never bleeds outside it.
 */
function featherMask(covered: Float32Array, w: number, h: number, radius: number): Float32Array {
  const once = boxBlur(covered, scratch("feather1", covered.length), w, h, 1, radius);
  const blurred = boxBlur(once, scratch("feather2", covered.length), w, h, 1, radius);
  for (let i = 0; i < blurred.length; i++) {
    const t = Math.min(1, Math.max(0, (blurred[i]! - 0.5) * 2));
    blurred[i] = t * t * (3 - 2 * t);
  }
  return blurred;
}

/** Separable box blur into `out` with running sums (edges clamped), any number of interleaved channels. */
function boxBlur(input: Float32Array, out: Float32Array, w: number, h: number, channels: number, radius: number): Float32Array {
  const tmp = scratch("blur", input.length);
  blurLines(input, tmp, h, w, channels, radius, w * channels, channels);
  blurLines(tmp, out, w, h, channels, radius, channels, w * channels);
  return out;
}

/** Blurs `lines` lines of `length` samples each; `lineStride` and `step` are in array elements. */
function blurLines(
  input: Float32Array,
  out: Float32Array,
  lines: number,
  length: number,
  channels: number,
  radius: number,
  lineStride: number,
  step: number,
): void {
  const norm = 1 / (2 * radius + 1);
  const last = length - 1;
  for (let line = 0; line < lines; line++) {
    for (let c = 0; c < channels; c++) {
      const base = line * lineStride + c;
      const first = input[base]!;
      const end = input[base + last * step]!;
      let acc = 0;
      for (let i = -radius; i <= radius; i++) acc += input[base + (i < 0 ? 0 : i > last ? last : i) * step]!;
      for (let i = 0; i < length; i++) {
        out[base + i * step] = acc * norm;
        const add = i + radius + 1;
        const drop = i - radius;
        acc += (add > last ? end : input[base + add * step]!) - (drop < 0 ? first : input[base + drop * step]!);
      }
    }
  }
}
