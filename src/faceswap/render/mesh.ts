// Regions and triangles of MediaPipe's 468-point face mesh, as Human gives it.
import { fillPolygon } from "./pixels.js";
import { scratch } from "./scratch.js";

// The face outline (MediaPipe FACE_OVAL, in order around the face).
export const OVAL = [
  10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152, 148, 176, 149, 150,
  136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
];

// Polygons on the mesh (MediaPipe indices, in order around each): the eye openings (along the lids),
// the inner and outer lips and the brows. The eye openings and lips carry the target's expression
// (see `targetExpression`, which draws the target's NOSE_BASE too); they and the brows are not
// skin-coloured but are never taken for something in front of the face (see `occlusion`).
export const EYE_OPENINGS = [
  [33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246],
  [263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466],
] as const;
/** Each eye's corners on the mesh, outer then inner, in the order of EYE_OPENINGS. */
export const EYE_CORNERS = [
  [33, 133],
  [263, 362],
] as const;
/** Each eye with its lids: the opening and the lids a little past each edge, above and below. */
export const EYE_LIDS = [
  [247, 30, 29, 27, 28, 56, 190, 243, 112, 26, 22, 23, 24, 110, 25, 130],
  [467, 260, 259, 257, 258, 286, 414, 463, 341, 256, 252, 253, 254, 339, 255, 359],
] as const;
export const INNER_LIPS = [78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308, 324, 318, 402, 317, 14, 87, 178, 88, 95];
export const OUTER_LIPS = [61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291, 375, 321, 405, 314, 17, 84, 181, 91, 146];
/** Every point of the lips, outer and inner. */
export const LIPS: readonly number[] = [...OUTER_LIPS, ...INNER_LIPS];
export const BROWS = [
  [70, 63, 105, 66, 107, 55, 65, 52, 53, 46],
  [300, 293, 334, 296, 336, 285, 295, 282, 283, 276],
];

/** The features' outlines (brows, outer lips, eye openings): not skin-coloured, but the face's own. */
export const FEATURE_OUTLINES: readonly (readonly number[])[] = [...BROWS, OUTER_LIPS, ...EYE_OPENINGS];

/** Sign of the summed signed area of the mesh's triangles: the winding of the side facing the camera. */
export function facingSign(mesh: ArrayLike<number>, triangles: ArrayLike<number>): number {
  let sum = 0;
  for (let t = 0; t + 2 < triangles.length; t += 3) sum += signedArea(mesh, triangles[t]!, triangles[t + 1]!, triangles[t + 2]!);
  return sum >= 0 ? 1 : -1;
}

export function signedArea(mesh: ArrayLike<number>, a: number, b: number, c: number): number {
  return (mesh[2 * b]! - mesh[2 * a]!) * (mesh[2 * c + 1]! - mesh[2 * a + 1]!) - (mesh[2 * b + 1]! - mesh[2 * a + 1]!) * (mesh[2 * c]! - mesh[2 * a]!);
}

/**
 * Calls `pixel` for each patch pixel whose centre lies in triangle (a, b, c) of `mesh`, with its index,
 * interpolated depth and barycentric weights. A small tolerance closes hairline cracks between
 * neighbouring triangles.
 */
export function rasterise(
  mesh: Float32Array,
  depth: Float32Array,
  a: number,
  b: number,
  c: number,
  x0: number,
  y0: number,
  w: number,
  h: number,
  pixel: (index: number, z: number, wa: number, wb: number, wc: number) => void,
): void {
  const ax = mesh[2 * a]! - x0, ay = mesh[2 * a + 1]! - y0;
  const bx = mesh[2 * b]! - x0, by = mesh[2 * b + 1]! - y0;
  const cx = mesh[2 * c]! - x0, cy = mesh[2 * c + 1]! - y0;
  const area = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax);
  if (Math.abs(area) < 1e-3) return;
  const inv = 1 / area;
  const za = depth[a]!, zb = depth[b]!, zc = depth[c]!;
  const tx0 = Math.max(0, Math.floor(Math.min(ax, bx, cx)));
  const tx1 = Math.min(w - 1, Math.ceil(Math.max(ax, bx, cx)));
  const ty0 = Math.max(0, Math.floor(Math.min(ay, by, cy)));
  const ty1 = Math.min(h - 1, Math.ceil(Math.max(ay, by, cy)));
  const eps = -0.02;
  for (let y = ty0; y <= ty1; y++) {
    const py = y + 0.5;
    for (let x = tx0; x <= tx1; x++) {
      const px = x + 0.5;
      const wa = ((bx - px) * (cy - py) - (by - py) * (cx - px)) * inv;
      const wb = ((cx - px) * (ay - py) - (cy - py) * (ax - px)) * inv;
      const wc = 1 - wa - wb;
      if (wa < eps || wb < eps || wc < eps) continue;
      pixel(y * w + x, wa * za + wb * zb + wc * zc, wa, wb, wc);
    }
  }
}

/** 1 on the eye openings, outer lips and brows of `mesh` in the patch, 0 elsewhere (in scratch buffer `name`). */
export function featureMask(name: string, mesh: Float32Array, x0: number, y0: number, w: number, h: number): Float32Array {
  const mask = scratch(name, w * h).fill(0);
  for (const polygon of FEATURE_OUTLINES) fillPolygon(mask, w, h, mesh, polygon, x0, y0, 1);
  return mask;
}

/** The nose's base, from wing to wing below its tip: its wings and nostrils. */
export const NOSE_BASE = [98, 97, 2, 326, 327, 294, 392, 458, 19, 238, 166, 64];

/**
 * What a face's light is not measured on, in scratch buffer `name`: its `features` (featureMask of
 * the same `mesh` and patch) and its nose's base, whose nostrils are dark and red by their shape, not
 * by the light on them.
 */
export function unlitMask(name: string, features: Float32Array, mesh: Float32Array, x0: number, y0: number, w: number, h: number): Float32Array {
  const mask = scratch(name, w * h);
  mask.set(features);
  fillPolygon(mask, w, h, mesh, NOSE_BASE, x0, y0, 1);
  return mask;
}
