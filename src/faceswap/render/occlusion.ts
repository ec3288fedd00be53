import { boxBlur, scratch, toYCbCr, ycbcr } from "./swap.js";

/**
 * Marks in `keep` the covered pixels whose colour is far from the target's skin and that come in from
 * its edge (see keepOccluders): a hand or glass in front of the face, hair over the forehead,
 * background the mesh reaches on a turned head. Returns all the clusters of such pixels (make-up
 * too), or nothing when the face shows too little skin to tell. The skin model is the covered
 * pixels' mean and spread in YCbCr (outliers trimmed once); the brows and lips, which are not
 * skin-coloured but belong to the face, are never marked.
 */
export function occlusion(
  target: Float32Array,
  covered: Float32Array,
  keep: Float32Array,
  features: Float32Array,
  w: number,
  h: number,
  faceSize: number,
): Float32Array | undefined {
  const n = w * h;
  const mean = [0, 0, 0], spread = [Infinity, Infinity, Infinity];
  for (let round = 0; round < 2; round++) {
    const sum = [0, 0, 0], sq = [0, 0, 0];
    let count = 0;
    for (let i = 0; i < n; i++) {
      if (covered[i] === 0 || features[i] === 1) continue;
      toYCbCr(target, i * 3);
      if (round > 0 && !skinLike(mean, spread, 2.5)) continue;
      for (let c = 0; c < 3; c++) {
        sum[c]! += ycbcr[c]!;
        sq[c]! += ycbcr[c]! ** 2;
      }
      count++;
    }
    if (count < 32) return undefined;
    for (let c = 0; c < 3; c++) {
      mean[c] = sum[c]! / count;
      spread[c] = Math.sqrt(Math.max(4, sq[c]! / count - mean[c]! ** 2));
    }
  }
  const off = scratch("off", n).fill(0);
  for (let i = 0; i < n; i++) {
    if (covered[i] === 0 || features[i] === 1) continue;
    toYCbCr(target, i * 3);
    if (!skinLike(mean, spread, 5)) off[i] = 1;
  }
  // A lone outlier (a freckle, a highlight, codec noise) is not an occluder: only clusters count.
  const clustered = boxBlur(off, scratch("offBlur", n), w, h, 1, Math.max(1, Math.round(faceSize * 0.015)));
  for (let i = 0; i < n; i++) off[i] = covered[i] === 1 && clustered[i]! > 0.5 ? 1 : 0;
  keepOccluders(off, covered, keep, w, h, OCCLUDER_AREA * faceSize * faceSize);
  return off;
}

// A hand, a glass or hair in front of the face comes in from outside it: its not-skin region reaches
// the face's edge and is large. Make-up, tattoos and moles sit inside the face, apart from its edge
// (a clown's dark marks around the eyes and on the cheeks): those are the target's skin, replaced.
const OCCLUDER_AREA = 0.03;

/**
 * Marks in `keep` the connected regions of `off` (4-neighbours) that touch the edge of `covered` (a
 * pixel next to an uncovered one or the patch's border) and cover at least `minArea` pixels.
 */
function keepOccluders(off: Float32Array, covered: Float32Array, keep: Float32Array, w: number, h: number, minArea: number): void {
  const seen = scratch("offSeen", w * h).fill(0);
  const members: number[] = [];
  for (let start = 0; start < w * h; start++) {
    if (off[start] === 0 || seen[start] !== 0) continue;
    seen[start] = 1;
    members.length = 0;
    members.push(start);
    let edge = false;
    // `members` doubles as the queue: everything before `next` has had its neighbours visited.
    for (let next = 0; next < members.length; next++) {
      const i = members[next]!, x = i % w;
      if (x === 0 || x === w - 1 || i < w || i >= w * (h - 1)) {
        edge = true;
        continue;
      }
      for (const j of [i - 1, i + 1, i - w, i + w]) {
        if (covered[j] === 0) edge = true;
        else if (off[j] === 1 && seen[j] === 0) {
          seen[j] = 1;
          members.push(j);
        }
      }
    }
    if (edge && members.length >= minArea) for (const i of members) keep[i] = 1;
  }
}

/** Whether the colour in `ycbcr` lies within `k` spreads of the skin model (chroma, and luma at twice that). */
function skinLike(mean: number[], spread: number[], k: number): boolean {
  const dy = (ycbcr[0] - mean[0]!) / spread[0]!, dcb = (ycbcr[1] - mean[1]!) / spread[1]!, dcr = (ycbcr[2] - mean[2]!) / spread[2]!;
  return dcb * dcb + dcr * dcr <= k * k && Math.abs(dy) <= 2 * k;
}
