import { EYE_OPENINGS } from "./mesh.js";
import { boxBlur, fillPolygon, grownPolygon, MAD_TO_SD, middleBin, pointBounds, toYCbCr, ycbcr } from "./pixels.js";
import { scratch } from "./scratch.js";

/** Where a face's patch lies in the frame, and the face's size (pixels). */
export interface PatchPlace {
  x0: number;
  y0: number;
  w: number;
  h: number;
  faceSize: number;
}

/**
 * Marks in `keep` the covered pixels whose colour is far from the target's skin, or that are far darker
 * than its cheeks and nose away from its eyes (see DARK_SHARE), and that come in from its edge (see
 * keepOccluders): a glass in front of the face, hair over the forehead or a cheek, background the mesh
 * (`mesh`, frame pixels) reaches on a turned head. Returns all the clusters of such pixels (make-up
 * too), or nothing when the face shows too little skin to tell. The skin model is the covered pixels'
 * colour in YCbCr (see colourModel: from their median, then trimmed once), `hand` (see handMask) left
 * out of it and of the clusters, which only the face's own edge, not a hand's, makes occluders; the
 * brows and lips, which are not skin-coloured but belong to the face, are never marked.
 */
export function occlusion(
  target: Float32Array,
  mesh: Float32Array,
  covered: Float32Array,
  keep: Float32Array,
  features: Float32Array,
  place: PatchPlace,
  hand: Float32Array,
): Float32Array | undefined {
  const { x0, y0, w, h } = place;
  const n = w * h;
  const skin = colourModel(target, n, (i) => covered[i] === 1 && features[i] === 0 && hand[i] === 0, 2, 2.5);
  if (!skin) return undefined;
  const { mean, spread } = skin;
  const eyes = scratch("eyeMakeUp", n).fill(0);
  for (const polygon of EYE_OPENINGS) fillPolygon(eyes, w, h, grownPolygon(mesh, polygon, EYE_MAKE_UP), polygon, x0, y0, 1);
  // The luma that counts as dark is measured on the cheeks and nose, where the face's own colour is
  // (over the whole face the hair, as warm as the skin, lowered it until it passed for skin).
  const core = coreSkin(mesh, (i) => {
    if (covered[i] === 0 || features[i] === 1 || hand[i] === 1) return false;
    toYCbCr(target, i * 3);
    return skinLike(mean, spread, 5);
  }, place);
  const dark = DARK_SHARE * (medianLuma(target, n, (i) => core[i] === 1) ?? 0);
  const off = scratch("off", n).fill(0), darker = scratch("darker", n).fill(0);
  for (let i = 0; i < n; i++) {
    if (covered[i] === 0 || features[i] === 1 || hand[i] === 1) continue;
    toYCbCr(target, i * 3);
    if (!skinLike(mean, spread, 5)) off[i] = 1;
    else if (eyes[i] === 0 && ycbcr[0] < dark) darker[i] = 1;
  }
  // Dark alone is hair only where most of the pixels around are dark too: the shadow under a lower
  // lip or along a jaw is a line a few pixels wide, and reaching the face's edge it kept the target's
  // lip corner as a purple blotch on the new face.
  const mass = boxBlur(darker, scratch("darkMass", n), w, h, 1, Math.max(1, DARK_MASS * place.faceSize));
  for (let i = 0; i < n; i++) if (darker[i] === 1 && mass[i]! > 0.5) off[i] = 1;
  keepClusteredOccluders(off, covered, keep, place);
  return off;
}

// Luma below this share of the cheeks' and nose's (see coreSkin) is not skin, away from the eyes (see
// EYE_MAKE_UP): hair as warm as the skin beside it, over a bowed head, differed from it in luma alone,
// and with the face's shading it widened the skin's spread until no luma was far enough from it; the
// hair was drawn over. At 0.6 the shaded side of a face lit from one side (the pan's middle face)
// passed for hair too, and its eye liner and lips stayed the target's.
const DARK_SHARE = 0.45;
// Around the eyes, how far out from each opening's centre (a share of its size) dark is make-up (eye
// liner, its wing reaching the hair at the temple), which the new face replaces, unless its colour
// is far from the skin's.
const EYE_MAKE_UP = 0.8;
// Radius, as a share of the face, over which most pixels must be dark for a dark one to count.
const DARK_MASS = 0.04;

// Skin the hair over a face seldom covers: discs about the cheeks (50, 280, 101, 330, 205, 425) and
// down the nose (197, 5), SKIN_CORE_RADIUS of the face wide.
const SKIN_CORE = [50, 280, 101, 330, 205, 425, 197, 5];
const SKIN_CORE_RADIUS = 0.07;

/** 1 on the pixels that `include` picks within SKIN_CORE_RADIUS of a SKIN_CORE point of `mesh` (x, y pairs, frame pixels). */
export function coreSkin(mesh: Float32Array, include: (i: number) => boolean, { x0, y0, w, h, faceSize }: PatchPlace): Float32Array {
  const core = scratch("coreSkin", w * h).fill(0);
  const radius = SKIN_CORE_RADIUS * faceSize;
  for (const p of SKIN_CORE) {
    const cx = mesh[2 * p]! - x0, cy = mesh[2 * p + 1]! - y0;
    for (let y = Math.max(0, Math.floor(cy - radius)); y <= Math.min(h - 1, Math.ceil(cy + radius)); y++) {
      for (let x = Math.max(0, Math.floor(cx - radius)); x <= Math.min(w - 1, Math.ceil(cx + radius)); x++) {
        const i = y * w + x;
        if (core[i] === 0 && (x + 0.5 - cx) ** 2 + (y + 0.5 - cy) ** 2 <= radius * radius && include(i)) core[i] = 1;
      }
    }
  }
  return core;
}

/**
 * Marks in `keep` the occluders among the pixels `off` marks (those of `covered` far from the face's
 * skin): `off` is first reduced to its clusters, in place, since a lone outlier (a freckle, a
 * highlight, codec noise) is not an occluder; then the clusters that come in from the face's edge and
 * are large are kept (see keepOccluders).
 */
export function keepClusteredOccluders(off: Float32Array, covered: Float32Array, keep: Float32Array, { w, h, faceSize }: Omit<PatchPlace, "x0" | "y0">): void {
  const n = w * h;
  const clustered = boxBlur(off, scratch("offBlur", n), w, h, 1, Math.max(1, Math.round(faceSize * 0.015)));
  for (let i = 0; i < n; i++) off[i] = covered[i] === 1 && clustered[i]! > 0.5 ? 1 : 0;
  keepOccluders(off, covered, keep, w, h, OCCLUDER_AREA * faceSize * faceSize);
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
  const atEdge = (i: number) => {
    const x = i % w;
    return x === 0 || x === w - 1 || i < w || i >= w * (h - 1) || covered[i - 1] === 0 || covered[i + 1] === 0 || covered[i - w] === 0 || covered[i + w] === 0;
  };
  for (const members of regions(off, w, h)) {
    if (members.length >= minArea && members.some(atEdge)) for (const i of members) keep[i] = 1;
  }
}

/** The connected regions (4-neighbours) of the pixels `mask` marks, each as its pixels' indices. */
export function regions(mask: Float32Array, w: number, h: number): number[][] {
  const seen = scratch("regionSeen", w * h).fill(0);
  const all: number[][] = [];
  for (let start = 0; start < w * h; start++) {
    if (mask[start] === 0 || seen[start] === 1) continue;
    seen[start] = 1;
    // `members` doubles as the queue: everything before `next` has had its neighbours visited.
    const members = [start];
    for (let next = 0; next < members.length; next++) {
      const i = members[next]!, x = i % w;
      for (const j of [x > 0 ? i - 1 : -1, x < w - 1 ? i + 1 : -1, i - w, i + w]) {
        if (j < 0 || j >= w * h || mask[j] === 0 || seen[j] === 1) continue;
        seen[j] = 1;
        members.push(j);
      }
    }
    all.push(members);
  }
  return all;
}

interface ColourModel {
  mean: number[];
  spread: number[];
}

/**
 * Mean and spread in YCbCr of the pixels of `target` (rgb floats, `n` pixels) that `include` picks:
 * first their median and median absolute deviation, then in each of `rounds` - 1 further rounds the
 * mean and standard deviation of those within `trim` spreads. Nothing when fewer than 32 pixels are
 * left to tell. A mean and deviation from the start were pulled by whatever covers much of the face:
 * a block over a quarter of it widened the "skin" to take the block in, and the new face was drawn
 * over it.
 */
function colourModel(target: Float32Array, n: number, include: (i: number) => boolean, rounds: number, trim: number): ColourModel | undefined {
  const start = medianModel(target, n, include);
  if (!start) return undefined;
  const { mean, spread } = start;
  for (let round = 1; round < rounds; round++) {
    const sum = [0, 0, 0], sq = [0, 0, 0];
    let count = 0;
    for (let i = 0; i < n; i++) {
      if (!include(i)) continue;
      toYCbCr(target, i * 3);
      if (!skinLike(mean, spread, trim)) continue;
      for (let c = 0; c < 3; c++) {
        sum[c]! += ycbcr[c]!;
        sq[c]! += ycbcr[c]! ** 2;
      }
      count++;
    }
    if (count < 32) return undefined;
    for (let c = 0; c < 3; c++) {
      mean[c] = sum[c]! / count;
      spread[c] = Math.sqrt(Math.max(MIN_SPREAD ** 2, sq[c]! / count - mean[c]! ** 2));
    }
  }
  return { mean, spread };
}

// The smallest spread a colour model takes (YCbCr units): a flat patch of skin still varies this much
// frame to frame under the codec.
const MIN_SPREAD = 2;
// Histogram bins per YCbCr unit, over -HALF_RANGE..HALF_RANGE (luma is moved down by 128 into it).
const BINS_PER_UNIT = 2, HALF_RANGE = 128, BINS = 2 * HALF_RANGE * BINS_PER_UNIT;

/** Median luma of the picked pixels, as medianModel's (a histogram of half units), in one pass. */
export function medianLuma(target: Float32Array, n: number, include: (i: number) => boolean): number | undefined {
  const histogram = scratch("lumaHistogram", BINS).fill(0);
  let count = 0;
  for (let i = 0; i < n; i++) {
    if (!include(i)) continue;
    const y = 0.299 * target[i * 3]! + 0.587 * target[i * 3 + 1]! + 0.114 * target[i * 3 + 2]!;
    histogram[Math.min(BINS - 1, Math.max(0, Math.floor(y * BINS_PER_UNIT)))]!++;
    count++;
  }
  return count < 32 ? undefined : binMiddle(histogram, 0, count) + HALF_RANGE;
}

/** Median and scaled median absolute deviation per YCbCr channel of the picked pixels (histograms of half units). */
export function medianModel(target: Float32Array, n: number, include: (i: number) => boolean): { mean: number[]; spread: number[] } | undefined {
  const histogram = scratch("colourHistogram", 3 * BINS).fill(0);
  const bin = (c: number, value: number) => c * BINS + Math.min(BINS - 1, Math.max(0, Math.floor((value + HALF_RANGE) * BINS_PER_UNIT)));
  const offset = [-HALF_RANGE, 0, 0];
  let count = 0;
  for (let i = 0; i < n; i++) {
    if (!include(i)) continue;
    toYCbCr(target, i * 3);
    for (let c = 0; c < 3; c++) histogram[bin(c, ycbcr[c]! + offset[c]!)]!++;
    count++;
  }
  if (count < 32) return undefined;
  const median = [0, 1, 2].map((c) => binMiddle(histogram, c, count) - offset[c]!);
  histogram.fill(0);
  for (let i = 0; i < n; i++) {
    if (!include(i)) continue;
    toYCbCr(target, i * 3);
    for (let c = 0; c < 3; c++) histogram[bin(c, Math.abs(ycbcr[c]! - median[c]!))]!++;
  }
  const spread = [0, 1, 2].map((c) => Math.max(MIN_SPREAD, MAD_TO_SD * binMiddle(histogram, c, count)));
  return { mean: median, spread };
}

/** The value at the middle of channel `c`'s histogram of `count` values (the centre of the bin holding it). */
function binMiddle(histogram: Float32Array, c: number, count: number): number {
  return (middleBin(histogram, c * BINS, BINS, count) + 0.5) / BINS_PER_UNIT - HALF_RANGE;
}

/** Whether the colour in `ycbcr` lies within `k` spreads of the skin model (chroma, and luma at twice that). */
function skinLike(mean: number[], spread: number[], k: number): boolean {
  const dy = (ycbcr[0] - mean[0]!) / spread[0]!, dcb = (ycbcr[1] - mean[1]!) / spread[1]!, dcr = (ycbcr[2] - mean[2]!) / spread[2]!;
  return dcb * dcb + dcr * dcr <= k * k && Math.abs(dy) <= 2 * k;
}

// The hand's bones (MediaPipe hand landmarks: 0 the wrist, then four points up each of the thumb, index,
// middle, ring and little finger).
const HAND_BONES = [
  [0, 1], [1, 2], [2, 3], [3, 4], [0, 5], [5, 6], [6, 7], [7, 8], [9, 10], [10, 11], [11, 12],
  [13, 14], [14, 15], [15, 16], [0, 17], [17, 18], [18, 19], [19, 20], [5, 9], [9, 13], [13, 17],
] as const;
/** The last bone of each finger: its keypoint sits under the nail, short of the tip. */
const FINGER_TIPS = new Set([4, 8, 12, 16, 20]);
const TIP_REACH = 1;
// Half a finger's width is about half the spacing of the knuckles; a little more covers the keypoints'
// error, so no sliver of the new face is drawn along a finger.
const FINGER_RADIUS = 0.9;

// The bones drawn this many knuckle spacings wide lie on the hand whatever the keypoints' error: the
// hand's colour is measured there.
const CORE_RADIUS = 0.35;

/**
 * 1 on the patch's pixels under one of `hands` (21 keypoints each, frame pixels) in `target` (the
 * patch, rgb floats): the convex hull of its keypoints, each fingertip moved TIP_REACH of its last bone
 * further, and every bone drawn FINGER_RADIUS knuckle spacings wide around it (in scratch buffer
 * "hands"). The hull also takes the face between the fingers, which a keypoint model this coarse
 * cannot tell from a finger. Beyond the bones' core (CORE_RADIUS), clusters of pixels far from the
 * hand's colour there are left out: the hull and the wide bones reached over the target's eye and its
 * make-up, which then stayed, a dark smear beside the new face's eyes. Then the mask grows by colour
 * past the keypoints (see growByColour), told from the face's skin by a colour model of the `covered`
 * pixels that are neither the hand nor the face's `features`.
 */
export function handMask(
  hands: readonly Float32Array[],
  target: Float32Array,
  covered: Float32Array,
  features: Float32Array,
  { x0, y0, w, h, faceSize }: PatchPlace,
): Float32Array {
  const mask = scratch("hands", w * h).fill(0);
  let touched = false, widest = 0;
  for (const keypoints of hands) {
    const hand = Float32Array.from(keypoints);
    for (const tip of FINGER_TIPS) {
      for (const c of [0, 1]) hand[2 * tip + c] = keypoints[2 * tip + c]! + TIP_REACH * (keypoints[2 * tip + c]! - keypoints[2 * (tip - 1) + c]!);
    }
    let spacing = 0;
    for (const [a, b] of [[5, 9], [9, 13], [13, 17]] as const) spacing += Math.hypot(hand[2 * a]! - hand[2 * b]!, hand[2 * a + 1]! - hand[2 * b + 1]!) / 3;
    const reach = FINGER_RADIUS * spacing + 1;
    widest = Math.max(widest, spacing);
    if (missesPatch(hand, reach, { x0, y0, w, h })) continue;
    touched = true;
    fillPolygon(mask, w, h, hand, convexHull(hand), x0, y0, REACH);
    drawBones(mask, hand, reach, { x0, y0, w, h }, REACH);
    drawBones(mask, hand, CORE_RADIUS * spacing, { x0, y0, w, h }, CORE);
  }
  // Hands at another face of the frame leave this one's mask empty: its colour model and majority
  // blur, which would keep it empty, are skipped.
  if (!touched) return mask;
  const n = w * h;
  const model = colourModel(target, n, (i) => mask[i] === CORE, 3, 2);
  const like = scratch("handLike", n).fill(0);
  for (let i = 0; i < n; i++) {
    if (mask[i] === CORE) like[i] = 1;
    else if (mask[i] === REACH) {
      toYCbCr(target, i * 3);
      if (!model || skinLike(model.mean, model.spread, HAND_COLOUR)) like[i] = 1;
    }
  }
  // A majority over a few pixels decides: a lone pixel off the hand's colour (a shadow between
  // fingers, a nail's highlight) stays the hand's, a lone one on it beside the face does not, and the
  // edge that the new face meets is smooth rather than ragged.
  const majority = boxBlur(like, scratch("handMajority", n), w, h, 1, Math.max(1, faceSize * HAND_SMOOTH));
  for (let i = 0; i < n; i++) mask[i] = mask[i] === CORE || (mask[i] === REACH && majority[i]! > 0.5) ? 1 : 0;
  if (!model) return mask;
  growByColour(mask, target, model, colourModel(target, n, (i) => covered[i] === 1 && features[i] === 0 && mask[i] === 0, 2, 2.5), w, h, HAND_GROW * widest);
  // The same majority over what the growth added: a thin trail of hand-coloured pixels from a nail
  // to a mole beside it took the mole in, and the target's mole showed beside the finger.
  for (let i = 0; i < n; i++) like[i] = mask[i] === 0 ? 0 : 1;
  boxBlur(like, majority, w, h, 1, Math.max(1, faceSize * HAND_SMOOTH));
  for (let i = 0; i < n; i++) if (mask[i] === GROWN) mask[i] = majority[i]! > 0.5 ? 1 : 0;
  return mask;
}

/**
 * Grows `mask` (1 on the hand) up to `limit` steps into the pixels next to it whose colour is the
 * hand's rather than the face's skin, or a nail's (see handColoured); they are set to GROWN. The
 * keypoint model puts a fingertip short of the real one (a long nail, a finger pointing along the
 * face) and a bent finger's nail outside it: the new face's lips were drawn over the end of a finger
 * at the mouth, and its skin over a nail as a grey smudge.
 */
function growByColour(mask: Float32Array, target: Float32Array, hand: ColourModel, face: ColourModel | undefined, w: number, h: number, limit: number): void {
  if (!face) return;
  const n = w * h;
  const front: number[] = [];
  const step = scratch("handGrow", n).fill(0);
  for (let i = 0; i < n; i++) if (mask[i] === 1) front.push(i);
  for (let next = 0; next < front.length; next++) {
    const i = front[next]!, x = i % w;
    if (step[i]! >= limit) continue;
    for (const j of [x > 0 ? i - 1 : -1, x < w - 1 ? i + 1 : -1, i - w, i + w]) {
      if (j < 0 || j >= n || mask[j] !== 0 || step[j] !== 0) continue;
      step[j] = step[i]! + 1;
      toYCbCr(target, j * 3);
      if (!handColoured(hand, face)) continue;
      mask[j] = GROWN;
      front.push(j);
    }
  }
}

/**
 * Whether the colour in `ycbcr` is the hand's (`hand`) and not the face's skin (`face`): its chroma
 * nearer the hand's than the skin's and within GROW_CHROMA of their distance from the hand's, its luma
 * within GROW_LUMA of the hand's spreads. Chroma is compared in plain units: the hand's spread, taken
 * on the bones' core, is narrow, and the skin's is widened by everything on the face that is not skin.
 * A hand the face's own colour is never grown (nothing tells the two apart).
 */
function handColoured(hand: ColourModel, face: ColourModel): boolean {
  const apart = Math.hypot(hand.mean[1]! - face.mean[1]!, hand.mean[2]! - face.mean[2]!);
  if (apart < GROW_APART * Math.hypot(hand.spread[1]!, hand.spread[2]!)) return false;
  const own = Math.hypot(ycbcr[1] - hand.mean[1]!, ycbcr[2] - hand.mean[2]!);
  const skin = Math.hypot(ycbcr[1] - face.mean[1]!, ycbcr[2] - face.mean[2]!);
  if (own < skin && own <= GROW_CHROMA * apart && Math.abs(ycbcr[0] - hand.mean[0]!) <= GROW_LUMA * hand.spread[0]!) return true;
  // A nail or a highlight: brighter than the hand, its chroma between grey and the hand's.
  const along = Math.min(1, Math.max(0, (ycbcr[1] * hand.mean[1]! + ycbcr[2] * hand.mean[2]!) / Math.max(1e-6, hand.mean[1]! ** 2 + hand.mean[2]! ** 2)));
  const off = Math.hypot(ycbcr[1] - along * hand.mean[1]!, ycbcr[2] - along * hand.mean[2]!);
  return ycbcr[0] > hand.mean[0]! + hand.spread[0]! && off <= NAIL_CHROMA * apart && off < skin;
}

// How far the hand grows by its colour, in knuckle spacings; how far apart the hand's and the skin's
// chroma must be (in the hand's spreads), how far from the hand's a grown pixel's chroma may be (in
// that distance) and its luma (in the hand's spreads); how far a nail's chroma may be from the line
// between grey and the hand's (in the same distance).
const HAND_GROW = 3;
const GROW_APART = 2;
const GROW_CHROMA = 1.2;
const GROW_LUMA = 2;
const NAIL_CHROMA = 0.35;

const REACH = 1, CORE = 2, GROWN = 3;
// Spreads of the hand's colour (chroma; luma twice that) within which a pixel past the core counts as the hand's.
const HAND_COLOUR = 2.5;
// Radius of that majority, as a share of the face's size.
const HAND_SMOOTH = 0.025;

/** Whether the hand's keypoints' bounding box, grown by `radius`, lies wholly outside the patch. */
function missesPatch(hand: Float32Array, radius: number, { x0, y0, w, h }: Omit<PatchPlace, "faceSize">): boolean {
  const { minX, minY, maxX, maxY } = pointBounds(hand);
  return maxX + radius < x0 || minX - radius > x0 + w || maxY + radius < y0 || minY - radius > y0 + h;
}

/** Sets `value` on the patch's pixels within `radius` of one of the hand's bones. */
function drawBones(mask: Float32Array, hand: Float32Array, radius: number, { x0, y0, w, h }: Omit<PatchPlace, "faceSize">, value: number): void {
  for (const [a, b] of HAND_BONES) {
    const ax = hand[2 * a]! - x0, ay = hand[2 * a + 1]! - y0, bx = hand[2 * b]! - x0, by = hand[2 * b + 1]! - y0;
    const dx = bx - ax, dy = by - ay, length2 = Math.max(1e-6, dx * dx + dy * dy);
    const left = Math.max(0, Math.floor(Math.min(ax, bx) - radius)), right = Math.min(w - 1, Math.ceil(Math.max(ax, bx) + radius));
    const top = Math.max(0, Math.floor(Math.min(ay, by) - radius)), bottom = Math.min(h - 1, Math.ceil(Math.max(ay, by) + radius));
    for (let y = top; y <= bottom; y++) {
      for (let x = left; x <= right; x++) {
        const px = x + 0.5 - ax, py = y + 0.5 - ay;
        const t = Math.min(1, Math.max(0, (px * dx + py * dy) / length2));
        if ((px - t * dx) ** 2 + (py - t * dy) ** 2 <= radius * radius) mask[y * w + x] = value;
      }
    }
  }
}

/** Indices of the convex hull of `points` (x, y pairs), in order around it (monotone chain). */
function convexHull(points: Float32Array): number[] {
  const order = Array.from({ length: points.length / 2 }, (_, i) => i).sort((a, b) => points[2 * a]! - points[2 * b]! || points[2 * a + 1]! - points[2 * b + 1]!);
  const cross = (o: number, a: number, b: number) =>
    (points[2 * a]! - points[2 * o]!) * (points[2 * b + 1]! - points[2 * o + 1]!) - (points[2 * a + 1]! - points[2 * o + 1]!) * (points[2 * b]! - points[2 * o]!);
  const half = (indices: number[]) => {
    const chain: number[] = [];
    for (const i of indices) {
      while (chain.length >= 2 && cross(chain.at(-2)!, chain.at(-1)!, i) <= 0) chain.pop();
      chain.push(i);
    }
    chain.pop();
    return chain;
  };
  return [...half(order), ...half([...order].reverse())];
}

// How far past the marks `notSkin` finds their soft edges reach, as a share of the face.
export const MARK_EDGE = 0.03;
// A mark is darker than this share of the skin's median luma: make-up, a mole. Not the target's
// eyes past the mesh's openings (grown by EYE_REACH of their size), nor its lighter marks (a white eye
// shadow), which leave no grey ghost; counted as marks, they moved the speckles and light around the
// eyes of faces that wore no make-up.
const MARK_DARK = 0.7;
const EYE_REACH = 0.4;
// A box blur's output above this holds some of its input: running sums leave about 1e-8 where it holds none.
const RESIDUE = 0.02;

/**
 * The target's dark marks inside the face (see MARK_DARK), of the pixels occlusion() found (`notSkin`) that are
 * not kept as occluders, grown by MARK_EDGE to take in their soft edges; undefined without any.
 */
export function darkMarks(
  notSkin: Float32Array,
  keep: Float32Array,
  targetPatch: Float32Array,
  drawn: Float32Array,
  unlit: Float32Array,
  mesh: Float32Array,
  { x0, y0, w, h, faceSize }: PatchPlace,
): Float32Array | undefined {
  const n = w * h;
  // Only above the mouth, along the face's own axis (the eyes' middle to the chin): below it a dark
  // blob is far more often a lock of hair at the jaw or the shadow under a lip than paint, and a lock
  // found in one frame of twelve on the sofa's looking-down face, covered there, changed how the
  // encoder kept that face's detail in the frames after it.
  const ex = (mesh[2 * 33]! + mesh[2 * 263]!) / 2, ey = (mesh[2 * 33 + 1]! + mesh[2 * 263 + 1]!) / 2;
  const ax = mesh[2 * 152]! - ex, ay = mesh[2 * 152 + 1]! - ey, axis = Math.max(1e-6, ax * ax + ay * ay);
  const mouth = (((mesh[2 * 61]! + mesh[2 * 291]!) / 2 - ex) * ax + ((mesh[2 * 61 + 1]! + mesh[2 * 291 + 1]!) / 2 - ey) * ay) / axis;
  const eyes = scratch("marksEyes", n).fill(0);
  for (const polygon of EYE_OPENINGS) fillPolygon(eyes, w, h, grownPolygon(mesh, polygon, EYE_REACH), polygon, x0, y0, 1);
  const marks = scratch("marks", n).fill(0);
  let any = false;
  for (let i = 0; i < n; i++) {
    if (notSkin[i] === 0 || keep[i] === 1 || eyes[i] === 1 || unlit[i]! > 0) continue;
    const px = x0 + (i % w) + 0.5 - ex, py = y0 + Math.floor(i / w) + 0.5 - ey;
    if ((px * ax + py * ay) / axis >= mouth) continue;
    marks[i] = 1;
    any = true;
  }
  // Most faces have no candidates left by now: the luma and the occluders' surroundings, which cost
  // more, are measured only for those that do.
  if (!any) return undefined;
  const skin = medianLuma(targetPatch, n, (i) => drawn[i]! > 0 && notSkin[i] === 0 && unlit[i] === 0);
  if (skin === undefined) return undefined;
  // Nor beside an occluder kept at the outline: there a dark patch is a piece of it (a lock of the
  // hair over a brow, cut off from the rest by the clusters).
  const nearKept = boxBlur(keep, scratch("marksNearKept", n), w, h, 1, Math.max(1, MARK_EDGE * faceSize));
  any = false;
  for (let i = 0; i < n; i++) {
    if (marks[i] === 0) continue;
    toYCbCr(targetPatch, i * 3);
    if (nearKept[i]! > RESIDUE || ycbcr[0] >= MARK_DARK * skin) marks[i] = 0;
    else any = true;
  }
  if (!any) return undefined;
  // Painted marks are blobs; a strand of hair across the face is a line. Without this the new face
  // went over the strands of the sofa's looking-down face, and its sharpness went with them.
  for (const members of regions(marks, w, h)) if (!blob(members, w, MARK_AREA * faceSize * faceSize)) for (const i of members) marks[i] = 0;
  const out = boxBlur(marks, scratch("marksNear", n), w, h, 1, Math.max(1, MARK_EDGE * faceSize));
  for (let i = 0; i < n; i++) out[i] = out[i]! > RESIDUE ? 1 : 0;
  return out;
}

// A blob holds at least MARK_AREA of the face's size squared, fills BLOB_FILL of its bounding box and
// is at most BLOB_ELONGATION times as long as it is wide (from its second moments).
const MARK_AREA = 0.003;
const BLOB_FILL = 0.3;
const BLOB_ELONGATION = 2.5;

function blob(members: readonly number[], w: number, minArea: number): boolean {
  if (members.length < minArea) return false;
  let minX = Infinity, maxX = -Infinity, minY = Infinity, maxY = -Infinity, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (const i of members) {
    const x = i % w, y = (i - x) / w;
    minX = Math.min(minX, x);
    maxX = Math.max(maxX, x);
    minY = Math.min(minY, y);
    maxY = Math.max(maxY, y);
    sx += x;
    sy += y;
    sxx += x * x;
    syy += y * y;
    sxy += x * y;
  }
  const n = members.length;
  if (n < BLOB_FILL * (maxX - minX + 1) * (maxY - minY + 1)) return false;
  const vx = sxx / n - (sx / n) ** 2, vy = syy / n - (sy / n) ** 2, cxy = sxy / n - (sx / n) * (sy / n);
  const root = Math.sqrt(((vx - vy) / 2) ** 2 + cxy * cxy);
  const major = (vx + vy) / 2 + root, minor = Math.max(1e-6, (vx + vy) / 2 - root);
  return Math.sqrt(major / minor) <= BLOB_ELONGATION;
}
