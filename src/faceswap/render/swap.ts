import type { StyleVersion } from "../../platform/db/schema.js";
import { pyramidBlend } from "./blend.js";
import { targetExpression } from "./expression.js";
import { matchGrain } from "./grain.js";
import { BROWS, EYE_CORNERS, EYE_OPENINGS, facingSign, featureMask, INNER_LIPS, LIPS, OVAL, rasterise, signedArea, unlitMask } from "./mesh.js";
import { darkMarks, handMask, MARK_EDGE, occlusion } from "./occlusion.js";
import { boxBlur, fillPolygon, fromYCbCr, grownPolygon, pointBounds, sampleField, sampleTriangle, toYCbCr, ycbcr } from "./pixels.js";
import { pushPull } from "./push-pull.js";
import { scratch } from "./scratch.js";
import { withoutOccluders } from "./source-occluders.js";
import { fitSimilarity } from "./similarity.js";

/** The replacement face: an rgb24 crop around it and its mesh (x, y pairs) in crop pixels. */
export interface SourceFace {
  pixels: Uint8Array;
  width: number;
  height: number;
  mesh: Float32Array;
}

export interface StyleParams {
  /** Peak opacity of the new face over the target. */
  opacity: number;
  /**
   * Share of the new face's chroma finer than that blur that stays off its skin, on its features (eyes,
   * brows, lips); its skin keeps SKIN_CHROMA_DETAIL whatever the style (see relight).
   */
  chromaDetail: number;
  /** Blur radius of that low frequency as a share of the face's size. */
  lightRadius: number;
  /** Most unsharp-mask amount on the warped face (0 = off); less where the footage is softer (see matchedSharpening). */
  sharpen: number;
  /**
   * How much more fine-band energy than the footage's the new face may keep before encoding (see
   * matchedSharpening): x264 takes more of the new face's fine detail (low-contrast texture of a
   * resampled photo) than of the footage's, which survived one encode already. v1 lays 40 % of the
   * footage's own texture back over the new face (`keepTexture`), which x264 keeps as it keeps the
   * footage's; v2's detail is all the photo's. At 1.0 the test clips' new faces kept 0.55-0.81 of the
   * footage's Laplacian variance after encoding, where the footage alone keeps 0.72-0.75; at 1.4 (v2,
   * its light moved 90 % of the way) 0.61-0.94. With the light moved all the way, a bright photo on
   * darker footage keeps its detail's contrast only against the darker level, and v2 at 1.4 left the
   * sofa's faces at 0.62 (the floor is 0.68); at 1.7 (and an unsharp mask of up to 2.8) they keep 0.73,
   * the test clips 0.64-0.97. On skin v2 keeps 1.5: at 1.7 the stairs' faces, softer footage, came
   * out sharper than the footage around them (1.19 of its Laplacian variance at the median, up to
   * 1.34; the out-of-focus woman's skin etched), at 1.5 1.08 (up to 1.24), with the sofa's at 0.71; at
   * 1.4 the sofa's fell to its floor, at 1.2 under it (0.66).
   */
  sharpenHeadroom: { skin: number; features: number };
  /** Share of the target's own fine detail (high-pass) kept on top of the new face. */
  keepTexture: number;
  /** Feather width of the mask edge as a share of the face's size. */
  feather: number;
  /** How far the target's inner landmarks move to the source's proportions (0 = target geometry); its expression stays. */
  reshape: number;
}

/**
 * Both styles draw the new face through the target's own mesh (front-facing triangles only, nearest
 * first, never past its visible outline, the source sampled bicubically), keep the target's open
 * mouth, its eye openings and lips (its expression, see targetExpression) and whatever covers the face
 * (pixels far from its skin colour), relight the new face with the target's low-frequency light and
 * colour (the target's low band under the new face's high band; on skin only a little of the source's
 * finer chroma and none of its specular highlights stay, so a coloured light on the source photo does
 * not; its light and colour go all the way to the target's, so its brightness is the neck's; the
 * target's own highlights go back on top, see targetHighlights), and lay
 * it on with a multi-band (Laplacian pyramid) blend whose support ends inside the target's visible
 * face, so neither a seam nor a colour step shows. (A Poisson-style blend from the
 * outline's differences was tried and left out: hair and background along the outline stained the face
 * with bands.)
 *
 * v1 keeps more of the target's skin: 40 % of its fine texture on top of the new face, the new
 * face's light and colour taken from a wide blur (25 % of the face) with 20 % of its features' finer
 * chroma, an unsharp mask on luma (up to 1.8) against that blur's softness, the
 * features half way to the source's proportions, 95 % opacity and a wide feather (8 %). v2 keeps the
 * new face: its light and colour come from a blur over 8 % of the face (the shading of a turned
 * head's far side is narrower than a wider blur), with 60 % of its features' finer chroma (a tenth of
 * the source's own skin tone kept left the faces of warm footage grey-pink, and a tenth of its light
 * the darkest faces lighter than their necks), an unsharp mask on luma restores the detail the warp
 * and the new face's softer photo lose, but no more than the footage shows under it, on skin and on
 * the features each (see matchedSharpening; at most 2.8, 30 % less on the features), the features
 * take the source's proportions fully (less as the head turns, see `frontal`, or is bowed against the
 * photo's, see `samePitch`), full opacity and a narrower feather (4.5 %). The unsharp mask works on
 * luma alone (on each channel, 1.0 doubled the speckles), its change saturates, and it is weaker on
 * the features, which are sharp already.
 */
export const STYLES: Record<StyleVersion, StyleParams> = {
  v1: { opacity: 0.95, chromaDetail: 0.2, lightRadius: 0.25, sharpen: 1.8, sharpenHeadroom: { skin: 1.4, features: 1.4 }, keepTexture: 0.4, feather: 0.08, reshape: 0.5 },
  v2: { opacity: 1, chromaDetail: 0.6, lightRadius: 0.08, sharpen: 2.8, sharpenHeadroom: { skin: 1.5, features: 1.7 }, keepTexture: 0, feather: 0.045, reshape: 1 },
};

// The face outline stays where the target's is, so the blend edge follows the target's head; only the
// features inside take the source's proportions.
const FACE_OVAL = new Set(OVAL);

// The lips, the eye openings, the brows and the points of MediaPipe's FACEMESH_NOSE connections. Each
// feature moves as one piece, see `reshape`; the mouth and the eyes open and close, so they are scaled
// only along the line through their `corners`.
interface Feature {
  points: readonly number[];
  corners?: readonly [number, number];
}

const FEATURES: readonly Feature[] = [
  { points: LIPS, corners: [61, 291] },
  { points: EYE_OPENINGS[0], corners: EYE_CORNERS[0] },
  { points: EYE_OPENINGS[1], corners: EYE_CORNERS[1] },
  { points: BROWS[0]! },
  { points: BROWS[1]! },
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
  // Features larger than the target's face would reach past its outline, where nothing is drawn
  // (see warpTriangles); they are pulled in to just inside it instead of being cut off.
  insideOutline(out, target, RESHAPE_INSET);
  return out;
}

const RESHAPE_INSET = 0.97;

// The reshape lays the source's proportions on in the image plane, which is right for a face seen from
// the front only: on a head turned to the side it moved the far eye and brow across the foreshortened
// side, and the new face read as a second, frontal face laid over the turned one. It fades out between
// these ratios of the nose tip's distances to the two sides of the face.
const FRONTAL = [0.55, 0.85] as const;

// Nor is it right for a head bowed or raised against the source photo's: over the bowed, hair-covered
// middle face of sample2 it drew the eyes above the target's and a nose tip pasted over its own. It
// fades out as the nose tip's place between the eyes and the mouth (see noseDrop) differs from the
// photo's by these amounts: that bowed head's lies 0.22-0.28 further down the way than sample3's photo's,
// the upright faces of the test footage within 0.1 (the most, 0.1 up, sample1's laughing face, her head
// thrown back a little).
const SAME_PITCH = [0.13, 0.21] as const;

/**
 * 1 for a face whose mesh `target` is bowed or raised as far as the source's `source`, falling to 0
 * past SAME_PITCH.
 */
export function samePitch(target: Float32Array, source: Float32Array): number {
  const gap = Math.abs(noseDrop(target) - noseDrop(source));
  return Math.min(1, Math.max(0, (SAME_PITCH[1] - gap) / (SAME_PITCH[1] - SAME_PITCH[0])));
}

/**
 * Where the nose tip lies along the line from the eyes' middle to the mouth's, as a share of it: a head
 * bowed forward foreshortens the face below the nose and its nose tip comes down toward the mouth.
 */
function noseDrop(mesh: Float32Array): number {
  const ex = (mesh[2 * 33]! + mesh[2 * 263]!) / 2, ey = (mesh[2 * 33 + 1]! + mesh[2 * 263 + 1]!) / 2;
  const ax = (mesh[2 * 61]! + mesh[2 * 291]!) / 2 - ex, ay = (mesh[2 * 61 + 1]! + mesh[2 * 291 + 1]!) / 2 - ey;
  return ((mesh[2 * 1]! - ex) * ax + (mesh[2 * 1 + 1]! - ey) * ay) / Math.max(1e-6, ax * ax + ay * ay);
}

/** 1 for a face seen from the front, falling to 0 as it turns to the side (see FRONTAL). */
function frontal(mesh: Float32Array): number {
  const near = Math.hypot(mesh[2 * 1]! - mesh[2 * 234]!, mesh[2 * 1 + 1]! - mesh[2 * 234 + 1]!);
  const far = Math.hypot(mesh[2 * 1]! - mesh[2 * 454]!, mesh[2 * 1 + 1]! - mesh[2 * 454 + 1]!);
  const ratio = Math.min(near, far) / Math.max(1e-6, Math.max(near, far));
  return Math.min(1, Math.max(0, (ratio - FRONTAL[0]) / (FRONTAL[1] - FRONTAL[0])));
}

/**
 * Moves each inner point of `mesh` that lies further from the centre of `outline`'s outline (OVAL)
 * than `limit` of the way to it back to that distance, along the same ray.
 */
function insideOutline(mesh: Float32Array, outline: Float32Array, limit: number): void {
  let cx = 0, cy = 0;
  for (const i of OVAL) {
    cx += outline[2 * i]! / OVAL.length;
    cy += outline[2 * i + 1]! / OVAL.length;
  }
  for (let i = 0; i < mesh.length; i += 2) {
    if (FACE_OVAL.has(i / 2)) continue;
    const dx = mesh[i]! - cx, dy = mesh[i + 1]! - cy;
    const bound = limit * outlineExit(outline, cx, cy, dx, dy);
    if (bound >= 1) continue;
    mesh[i] = cx + dx * bound;
    mesh[i + 1] = cy + dy * bound;
  }
}

/** Where the ray from (cx, cy) along (dx, dy) leaves `mesh`'s outline, in units of (dx, dy). */
function outlineExit(mesh: Float32Array, cx: number, cy: number, dx: number, dy: number): number {
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
  return exit;
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
  /** 1 where a visible triangle of the target's own mesh covers the pixel (the warp drew it or filled it). */
  covered: Float32Array;
  /** How far the source's texture drawn at each pixel can be trusted, 0..1 (see sourceTrust); 1 off the face. */
  trusted: Float32Array;
}

/**
 * Draws `source` onto the face whose mesh is `target` (x, y pairs in frame pixels, `depth` per point;
 * `neutral` is its track's mean shape over the same face, see `reshape`; `lowered`, how far its lids
 * are lowered, see targetExpression) in the rgb24 `frame`, in place, leaving `hands` (21 keypoints
 * each, frame pixels) where they cover it. See STYLES for the steps.
 */
export function swapFace(
  frame: Uint8Array,
  width: number,
  height: number,
  target: Float32Array,
  depth: Float32Array,
  neutral: Float32Array,
  lowered: number,
  source: SourceFace,
  triangles: ArrayLike<number>,
  mirror: Int32Array,
  style: StyleParams,
  hands: readonly Float32Array[] = [],
): void {
  const share = style.reshape * frontal(target) * samePitch(target, source.mesh);
  const drawnMesh = reshape(target, neutral, source.mesh, share);
  const patch = warpTriangles(width, height, target, drawnMesh, depth, source, triangles, mirror);
  if (!patch) return;
  const { x0, y0, w, h, faceSize, warped, covered, trusted } = patch;
  const n = w * h;
  const targetPatch = scratch("target", n * 3);
  for (let y = 0; y < h; y++) {
    const row = ((y0 + y) * width + x0) * 3;
    for (let i = 0; i < w * 3; i++) targetPatch[y * w * 3 + i] = frame[row + i]!;
  }
  // 1 where the new face is drawn: the target's visible face, less whatever is in front. Its mouth,
  // open or closed, is the target's, carried to where the reshape put the lips (see targetExpression);
  // kept in place as well, an open mouth's inside showed at both places, a lip's width apart.
  // A hand in front has an edge of its own, which the new face meets without a feather: only the
  // face's outline and the occluders at the outline fade it in (`inside`). Feathered
  // from the hand's edge too, the target's face showed through beside the fingers (its eye make-up,
  // as a dark smear over the new face's eyes).
  const place = { x0, y0, w, h, faceSize };
  const targetFeatures = featureMask("targetFeatures", target, x0, y0, w, h);
  const hand = handMask(hands, targetPatch, covered, targetFeatures, place);
  const keep = scratch("keep", n).fill(0);
  const notSkin = occlusion(targetPatch, target, covered, keep, targetFeatures, place, hand);
  const inside = scratch("inside", n), drawn = scratch("drawn", n);
  for (let i = 0; i < n; i++) {
    inside[i] = covered[i]! * (1 - keep[i]!);
    drawn[i] = inside[i]! * (1 - hand[i]!);
  }
  // The light is measured on skin only, on both faces: the target's eyes, brows, lips and make-up
  // blurred into its light field would lay a dark ghost of its features over the new face's (a second
  // face where the two differ, as on a turned head), and the new face's own would be lifted by the
  // same ratio. Nor on the nose's base: the target's nostrils, blurred, darkened the new face's nose
  // where its own nostrils were not and reddened its tip.
  const drawnFeatures = featureMask("drawnFeatures", drawnMesh, x0, y0, w, h);
  const drawnUnlit = unlitMask("drawnUnlit", drawnFeatures, drawnMesh, x0, y0, w, h);
  const targetUnlit = unlitMask("targetUnlit", targetFeatures, target, x0, y0, w, h);
  // Nor on what is not skin, nor on the soft edges of the target's dark marks, which pass for skin by
  // colour: darker than the skin, the edges of a painted diamond under an eye lowered the light there
  // and left a grey ghost of it on the new face.
  const marks = notSkin && darkMarks(notSkin, keep, targetPatch, drawn, targetUnlit, target, place);
  const sourceSkin = scratch("sourceSkin", n), sourceLit = scratch("sourceLit", n), targetSkin = scratch("targetSkin", n);
  for (let i = 0; i < n; i++) {
    sourceSkin[i] = covered[i]! * (1 - drawnFeatures[i]!);
    sourceLit[i] = covered[i]! * (1 - drawnUnlit[i]!);
    targetSkin[i] = drawn[i]! * (1 - targetUnlit[i]!) * (notSkin ? 1 - notSkin[i]! : 1) * (marks ? 1 - marks[i]! : 1);
  }
  relight(warped, targetPatch, covered, sourceSkin, sourceLit, targetSkin, w, h, style, Math.max(1, style.lightRadius * faceSize));
  if (style.sharpen > 0) {
    const most = { skin: style.sharpen, features: style.sharpen * (1 - FEATURE_SHARPEN_DAMP) };
    sharpenLuma(warped, w, h, matchedSharpening(warped, targetPatch, drawn, drawnFeatures, w, h, most, style.sharpenHeadroom), drawnFeatures);
  }
  if (style.keepTexture > 0) addDetail(warped, targetPatch, w, h, style.keepTexture, Math.max(1, faceSize / 80));
  targetHighlights(warped, targetPatch, targetSkin, drawn, targetUnlit, targetFeatures, drawnFeatures, w, h, faceSize);
  // Grain comes last: sharpened, it would be coarser than the footage's.
  const bothSkin = scratch("bothSkin", n);
  for (let i = 0; i < n; i++) bothSkin[i] = targetSkin[i]! * sourceSkin[i]!;
  matchGrain(warped, targetPatch, bothSkin, drawn, place);
  targetExpression(warped, frame, width, height, target, drawnMesh, place, lowered);
  // The blend's support ends a pixel or two inside the visible face; its mask fades in over the
  // style's feather, each band of the pyramid over its own scale (see pyramidBlend).
  const support = featherMask(drawn, w, h, Math.max(1, SUPPORT_FEATHER * faceSize), "support");
  const weight = featherMask(inside, w, h, Math.max(1, style.feather * faceSize), "weight");
  if (marks) coverMarks(weight, marks, inside, w, h, Math.max(1, MARK_EDGE * faceSize));
  const trust = featherMask(trusted, w, h, Math.max(1, style.feather * faceSize), "trustMask", TRUST_FADE);
  for (let i = 0; i < n; i++) weight[i]! *= style.opacity * trust[i]!;
  const blended = scratch("blended", n * 3);
  blended.set(targetPatch);
  const hole = scratch("hole", n);
  for (let i = 0; i < n; i++) hole[i] = inside[i]! * hand[i]!;
  pyramidBlend(blended, warped, weight, support, hole, w, h);
  for (let y = 0; y < h; y++) {
    const row = ((y0 + y) * width + x0) * 3;
    for (let x = 0; x < w; x++) {
      const i = y * w + x;
      if (support[i]! <= 0) continue;
      toFrame(blended, i * 3, frame, row + x * 3);
    }
  }
}

// The new face's share per pixel follows how far its texture there can be trusted (see sourceTrust),
// smoothed: below TRUST_FADE[0] the target's own face shows, above TRUST_FADE[1] the new face wholly.
// Where the source photo shows a part of the face foreshortened (the near cheek and temple of a head
// turned the other way), stretching its few pixels over the target's wide cheek drew a soft grey smear
// from the eye to the hair. There the target's own skin stays, which carries little of anyone's
// identity (the blend's coarse bands carry the new face's colour into its edge); the features the
// source shows well are drawn.
const TRUST_FADE = [0.25, 0.75] as const;

// Width of the blend's support's own fade, as a share of the face: about a pixel on small faces.
const SUPPORT_FEATHER = 0.012;

/**
 * Raises `weight` to the new face's whole over `marks` inside the face, faded in over `fade` pixels.
 * Where a mark reaches the face's outline (a painted diamond under the far eye of a turned head), the
 * feather and the blend's coarse bands mixed the target's mark into the new face as a grey ghost.
 */
function coverMarks(weight: Float32Array, marks: Float32Array, inside: Float32Array, w: number, h: number, fade: number): void {
  const soft = boxBlur(marks, scratch("marksSoft", marks.length), w, h, 1, Math.max(1, fade / 3));
  for (let i = 0; i < marks.length; i++) weight[i] = Math.max(weight[i]!, Math.min(1, 2 * soft[i]!) * inside[i]!);
}

/**
 * Writes the rgb float pixel at `p` of `rgb` into `frame` at `q`, rounded; a colour out of range is
 * moved toward its own luma until it fits rather than clipped per channel, which turned bright skin
 * (a lit nose) mauve where red clipped and blue did not.
 */
function toFrame(rgb: Float32Array, p: number, frame: Uint8Array, q: number): void {
  const r = rgb[p]!, g = rgb[p + 1]!, b = rgb[p + 2]!;
  const y = Math.min(255, Math.max(0, 0.299 * r + 0.587 * g + 0.114 * b));
  const hi = Math.max(r, g, b), lo = Math.min(r, g, b);
  let t = 1;
  if (hi > 255) t = Math.min(t, (255 - y) / Math.max(1e-6, hi - y));
  if (lo < 0) t = Math.min(t, y / Math.max(1e-6, y - lo));
  frame[q] = Math.min(255, Math.max(0, y + t * (r - y) + 0.5));
  frame[q + 1] = Math.min(255, Math.max(0, y + t * (g - y) + 0.5));
  frame[q + 2] = Math.min(255, Math.max(0, y + t * (b - y) + 0.5));
}

/**
 * Rasterises the target's visible surface: triangles of the target's own mesh that face the camera,
 * the nearest at each pixel (depth test), and draws into each the source texture through the same
 * triangle of the reshaped mesh `drawnMesh`. A triangle turned away in the target (the far side of a
 * turned head) or folded over by the reshape draws nothing; one turned away in the source photo takes
 * its mirror image's texture (see sourceTrust).
 */
function warpTriangles(
  width: number,
  height: number,
  target: Float32Array,
  drawnMesh: Float32Array,
  depth: Float32Array,
  source: SourceFace,
  triangles: ArrayLike<number>,
  mirror: Int32Array,
): Patch | undefined {
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (let i = 0; i < target.length; i += 2) {
    minX = Math.min(minX, target[i]!, drawnMesh[i]!);
    maxX = Math.max(maxX, target[i]!, drawnMesh[i]!);
    minY = Math.min(minY, target[i + 1]!, drawnMesh[i + 1]!);
    maxY = Math.max(maxY, target[i + 1]!, drawnMesh[i + 1]!);
  }
  const faceSize = Math.sqrt((maxX - minX) * (maxY - minY));
  const pad = Math.ceil(OUTLINE_MARGIN * faceSize) + 2;
  const x0 = Math.max(0, Math.floor(minX) - pad);
  const y0 = Math.max(0, Math.floor(minY) - pad);
  const x1 = Math.min(width, Math.ceil(maxX) + pad);
  const y1 = Math.min(height, Math.ceil(maxY) + pad);
  const w = x1 - x0;
  const h = y1 - y0;
  if (w < 8 || h < 8) return undefined;
  const warped = scratch("warped", w * h * 3).fill(0);
  const covered = scratch("covered", w * h).fill(0);
  const trusted = scratch("trusted", w * h).fill(1);
  const zTarget = scratch("zTarget", w * h).fill(Infinity);
  const zDrawn = scratch("zDrawn", w * h).fill(Infinity);
  const facing = facingSign(target, triangles);
  // Pass 1: the target's own visible surface (nearest front-facing triangle per pixel).
  for (let t = 0; t + 2 < triangles.length; t += 3) {
    const a = triangles[t]!, b = triangles[t + 1]!, c = triangles[t + 2]!;
    if (signedArea(target, a, b, c) * facing <= 0) continue;
    rasterise(target, depth, a, b, c, x0, y0, w, h, (i, z) => {
      if (z < zTarget[i]!) zTarget[i] = z;
    });
  }
  const levels = pyramid(source, triangles, mirror);
  const sampled = insetMesh(source);
  const level = Math.max(0, Math.min(levels.length - 1, Math.floor(Math.log2(sourceSize(source) / faceSize))));
  const { pixels: src, width: sw, height: sh } = levels[level]!;
  const unit = 1 / 2 ** level;
  // Pass 2: the source through the reshaped mesh, nearest first, where the target's own surface is
  // or inside its outline (at the silhouette the target's own triangles can turn away from the camera
  // where the reshaped ones still face it; leaving those out cut off the new face's jaw and cheeks).
  const outline = scratch("outline", w * h).fill(0);
  fillPolygon(outline, w, h, grownPolygon(target, OVAL, OUTLINE_MARGIN), OVAL, x0, y0, 1);
  const weights = scratch("warpWeights", w * h * 4).fill(0);
  const { trust, mirrored, turned } = sourceTrust(drawnMesh, source.mesh, triangles, mirror);
  const gains = mirrorGains(source, levels, sampled, mirror);
  const other = scratch("mirrorSample", 3);
  // Each triangle's corners in the source level, its own and its mirror image's (x, y pairs).
  const ownCorners = new Float64Array(6), mirrorCorners = new Float64Array(6);
  for (let t = 0; t + 2 < triangles.length; t += 3) {
    const a = triangles[t]!, b = triangles[t + 1]!, c = triangles[t + 2]!;
    const weight = trust[t / 3]!;
    if (weight === 0) continue;
    for (let k = 0; k < 3; k++) {
      const v = triangles[t + k]!, m = mirror[v]!;
      ownCorners[2 * k] = sampled[2 * v]! * unit;
      ownCorners[2 * k + 1] = sampled[2 * v + 1]! * unit;
      mirrorCorners[2 * k] = sampled[2 * m]! * unit;
      mirrorCorners[2 * k + 1] = sampled[2 * m + 1]! * unit;
    }
    const allMirrored = turned[t / 3] === 1;
    const va = allMirrored ? 1 : mirrored[a]!, vb = allMirrored ? 1 : mirrored[b]!, vc = allMirrored ? 1 : mirrored[c]!;
    rasterise(drawnMesh, depth, a, b, c, x0, y0, w, h, (i, z, wa, wb, wc) => {
      if ((zTarget[i] === Infinity && outline[i] === 0) || z >= zDrawn[i]!) return;
      zDrawn[i] = z;
      const o = i * 3;
      const share = wa * va + wb * vb + wc * vc;
      if (share < 1) sampleTriangle(src, sw, sh, ownCorners, wa, wb, wc, warped, o);
      if (share > 0) {
        sampleTriangle(src, sw, sh, mirrorCorners, wa, wb, wc, other, 0);
        for (let ch = 0; ch < 3; ch++) {
          const lit = other[ch]! * (wa * gains[3 * a + ch]! + wb * gains[3 * b + ch]! + wc * gains[3 * c + ch]!);
          warped[o + ch] = share >= 1 ? lit : warped[o + ch]! + share * (lit - warped[o + ch]!);
        }
      }
      for (let ch = 0; ch < 3; ch++) weights[i * 4 + ch] = warped[o + ch]!;
      weights[i * 4 + 3] = weight;
      trusted[i] = weight;
      covered[i] = 1;
    });
  }
  // The reshape can fold a few small triangles (nostrils, lip corners) and leave holes in the target's
  // visible face; they take the colours around them instead of staying black.
  // The mesh has no triangles between the inner lips: the gap takes the new face's lips around it, so
  // the steps before the target's mouth is laid in (see targetExpression) see no hole there.
  const gap = scratch("mouthGap", w * h).fill(0);
  fillPolygon(gap, w, h, target, INNER_LIPS, x0, y0, 1);
  // Triangles the source shows foreshortened (see sourceTrust) take their texture partly from around them.
  pushPull(weights, w, h);
  for (let i = 0; i < w * h; i++) {
    if ((zTarget[i] === Infinity && gap[i] === 0) || (covered[i] === 1 && weights[i * 4 + 3]! >= 1)) continue;
    covered[i] = 1;
    for (let ch = 0; ch < 3; ch++) warped[i * 3 + ch] = weights[i * 4 + ch]!;
  }
  return { x0, y0, w, h, faceSize, warped, covered, trusted };
}

// A triangle the drawn face stretches this many times more, along its most stretched direction,
// than the face's median triangle is one the source shows foreshortened (its head turned the other
// way): its texture stretched that far smears (the lashes at the eye's outer corner become dark
// streaks toward the temple). From STRETCH[0] its weight falls, to nearly 0 at STRETCH[1].
const STRETCH = [1.2, 2.2] as const;
// A triangle whose mirror image on the other side of the source's face is stretched this many times
// less takes its texture from there: from MIRROR[0] partly, from MIRROR[1] wholly.
const MIRROR = [1.25, 1.8] as const;

/**
 * Per triangle, where its texture comes from and how far to trust it. The source photo shows one side
 * of a turned head foreshortened, and the drawn face (the target's head turned the other way) needs
 * that side wide: stretched, its texture smeared (hair at the temple became a dark streak from the eye
 * to the hairline). The mesh's mirror image (`mirror`, see mirrorPoints) of such a triangle lies on
 * the side the source shows well, so the texture comes from there instead (`mirrored`, 0..1, per
 * point, so neighbouring triangles blend without a step), as it does for a triangle the source shows
 * from behind. `trust` (1 = fully) falls with the stretch of what is sampled (see STRETCH).
 */
function sourceTrust(
  drawnMesh: Float32Array,
  sourceMesh: Float32Array,
  triangles: ArrayLike<number>,
  mirror: Int32Array,
): { trust: Float32Array; mirrored: Float32Array; turned: Float32Array } {
  const count = Math.floor(triangles.length / 3);
  const own = scratch("stretch", count), other = scratch("stretchMirror", count);
  const sorted = scratch("stretchSorted", count);
  let m = 0;
  for (let t = 0; t < count; t++) {
    const a = triangles[3 * t]!, b = triangles[3 * t + 1]!, c = triangles[3 * t + 2]!;
    const drawnSide = signedArea(drawnMesh, a, b, c);
    // A triangle turned over between the source and the drawn mesh is seen from its other side; its
    // mirror image, seen from the front, is turned over.
    own[t] = drawnSide * signedArea(sourceMesh, a, b, c) > 0 ? stretchOf(drawnMesh, sourceMesh, a, b, c, a, b, c) : Infinity;
    const [ma, mb, mc] = [mirror[a]!, mirror[b]!, mirror[c]!];
    other[t] = drawnSide * signedArea(sourceMesh, ma, mb, mc) < 0 ? stretchOf(drawnMesh, sourceMesh, a, b, c, ma, mb, mc) : Infinity;
    if (own[t]! < Infinity) sorted[m++] = own[t]!;
  }
  const median = m > 0 ? sorted.subarray(0, m).sort()[m >> 1]! : 1;
  const trustOf = (stretch: number) => Math.min(1, Math.max(0.02, (STRETCH[1] - stretch / median) / (STRETCH[1] - STRETCH[0])));
  const trust = scratch("trust", count), turned = scratch("turnedOver", count);
  const mirrored = scratch("mirrored", mirror.length).fill(0), touching = scratch("mirroredCount", mirror.length).fill(0);
  for (let t = 0; t < count; t++) {
    const ratio = own[t]! / other[t]!;
    turned[t] = own[t] === Infinity ? 1 : 0;
    const share = other[t] === Infinity ? 0 : own[t] === Infinity ? 1 : Math.min(1, Math.max(0, Math.log(ratio / MIRROR[0]) / Math.log(MIRROR[1] / MIRROR[0])));
    trust[t] = own[t] === Infinity && other[t] === Infinity ? 0 : (1 - share) * (own[t] === Infinity ? 0 : trustOf(own[t]!)) + share * trustOf(other[t]!);
    for (let k = 0; k < 3; k++) {
      const v = triangles[3 * t + k]!;
      mirrored[v]! += share;
      touching[v]!++;
    }
  }
  for (let v = 0; v < mirrored.length; v++) if (touching[v]! > 0) mirrored[v]! /= touching[v]!;
  return { trust, mirrored, turned };
}

/** Largest singular value of the affine map from the source's triangle (sa, sb, sc) to the drawn (a, b, c): A = F E^-1. */
function stretchOf(drawnMesh: Float32Array, sourceMesh: Float32Array, a: number, b: number, c: number, sa: number, sb: number, sc: number): number {
  const e1x = sourceMesh[2 * sb]! - sourceMesh[2 * sa]!, e1y = sourceMesh[2 * sb + 1]! - sourceMesh[2 * sa + 1]!;
  const e2x = sourceMesh[2 * sc]! - sourceMesh[2 * sa]!, e2y = sourceMesh[2 * sc + 1]! - sourceMesh[2 * sa + 1]!;
  const f1x = drawnMesh[2 * b]! - drawnMesh[2 * a]!, f1y = drawnMesh[2 * b + 1]! - drawnMesh[2 * a + 1]!;
  const f2x = drawnMesh[2 * c]! - drawnMesh[2 * a]!, f2y = drawnMesh[2 * c + 1]! - drawnMesh[2 * a + 1]!;
  const det = e1x * e2y - e2x * e1y;
  if (Math.abs(det) < 1e-6) return Infinity;
  const p = (f1x * e2y - f2x * e1y) / det, q = (f2x * e1x - f1x * e2x) / det;
  const r = (f1y * e2y - f2y * e1y) / det, u = (f2y * e1x - f1y * e2x) / det;
  const sum = p * p + q * q + r * r + u * u, area = p * u - q * r;
  return Math.sqrt((sum + Math.sqrt(Math.max(0, sum * sum - 4 * area * area))) / 2);
}

// The light a mirrored sample is matched to is the source's skin (its features, nostrils and what lies
// past its outline left out) blurred twice with a box of this radius, as a share of its face (as
// relight's radius), on a halving of the photo about MIRROR_LIGHT_TEXELS across the face.
const MIRROR_LIGHT_SPAN = 1 / 8;
const MIRROR_LIGHT_TEXELS = 32;
// How far a mirrored sample's light is moved, at most, per channel. The two sides of a photo lit from
// one side differ by well under this; a larger ratio is a point whose skin light is mostly hair or
// shadow at the outline, and scaled by it the mirrored texture would be a dark or bright blotch.
const MIRROR_GAIN = [0.5, 2] as const;
// Added to each side's light before the ratio, so that a nearly black channel (a deep shadow's blue)
// gives a gain near 1 rather than one that only the clamp holds.
const LIGHT_FLOOR = 1;
const mirrorGainCache = new WeakMap<SourceFace, Float32Array>();

/**
 * Per point and channel, how much brighter the source's skin is about the point than about its mirror
 * image. A texture taken from the mirror image carries the light of the other side of the source's
 * face: lit by a blue light from one side, that side's skin drawn beside this side's left a step where
 * the two met, which the relight, measuring light over a wider span, turned into a dark line from the
 * eye down the cheek. Scaled by the gain, the mirrored texture keeps its detail and takes this side's
 * light. Measured with the features in, the gain at a point by the eye set the lashes' darkness
 * against the skin's, and more speckles showed about the mirrored eye. Where something covered the
 * photo's face, `levels` carry the mirror side's skin there (see withoutOccluders), so the gain
 * about those points tends to 1: the texture drawn there is the mirror side's either way.
 */
function mirrorGains(source: SourceFace, levels: Level[], sampled: Float32Array, mirror: Int32Array): Float32Array {
  let gains = mirrorGainCache.get(source);
  if (gains) return gains;
  const faceSize = sourceSize(source);
  let level = 0;
  while (level + 1 < levels.length && faceSize / 2 ** (level + 1) >= MIRROR_LIGHT_TEXELS) level++;
  const { pixels, width, height } = levels[level]!;
  const unit = 1 / 2 ** level;
  const mesh = source.mesh.map((v) => v * unit);
  const n = width * height;
  // Made once per photo: its own arrays rather than scratch buffers, which are kept for every frame after
  // (the masks' functions take scratch names; nothing reads those buffers past this call).
  const skin = new Float32Array(n);
  fillPolygon(skin, width, height, mesh, OVAL, 0, 0, 1);
  const unlit = unlitMask("mirrorUnlit", featureMask("mirrorFeatures", mesh, 0, 0, width, height), mesh, 0, 0, width, height);
  const packed = new Float32Array(n * 4);
  for (let i = 0; i < n; i++) {
    const weight = skin[i]! * (1 - unlit[i]!);
    for (let c = 0; c < 3; c++) packed[i * 4 + c] = pixels[i * 3 + c]! * weight;
    packed[i * 4 + 3] = weight;
  }
  const radius = Math.max(1, MIRROR_LIGHT_SPAN * faceSize * unit);
  const field = boxBlur(boxBlur(packed, new Float32Array(n * 4), width, height, 4, radius), packed, width, height, 4, radius);
  const light = new Float32Array(mirror.length * 4);
  for (let v = 0; v < mirror.length; v++) sampleField(field, width, height, sampled[2 * v]! * unit - 0.5, sampled[2 * v + 1]! * unit - 0.5, light, 4 * v);
  gains = new Float32Array(mirror.length * 3).fill(1);
  for (let v = 0; v < mirror.length; v++) {
    const m = mirror[v]!, own = light[4 * v + 3]!, other = light[4 * m + 3]!;
    if (own < 1e-3 || other < 1e-3) continue;
    for (let c = 0; c < 3; c++) {
      const ratio = (light[4 * v + c]! / own + LIGHT_FLOOR) / (light[4 * m + c]! / other + LIGHT_FLOOR);
      gains[3 * v + c] = Math.min(MIRROR_GAIN[1], Math.max(MIRROR_GAIN[0], ratio));
    }
  }
  mirrorGainCache.set(source, gains);
  return gains;
}

/** Geometric mean of the width and height of the source's mesh, photo pixels. */
function sourceSize(source: SourceFace): number {
  const { minX, minY, maxX, maxY } = pointBounds(source.mesh);
  return Math.sqrt((maxX - minX) * (maxY - minY));
}

// How far past the target's outline the new face may reach, as a share of the outline's size: about
// the jitter of the mesh's outline points between frames, so the edge does not cut into the new face.
const OUTLINE_MARGIN = 0.05;

// The source's outline and, where its head is turned, the points beyond it lie on or past the edge of
// its skin; sampled as they are, they bring the hair and background behind the face into the new face
// as speckles (which v2's unsharp mask sharpens further). Each point is sampled no further out from
// the outline's centre than this share of the way to the outline.
const SOURCE_INSET = 0.9;
const insetMeshes = new WeakMap<SourceFace, Float32Array>();

function insetMesh(source: SourceFace): Float32Array {
  let inset = insetMeshes.get(source);
  if (inset) return inset;
  inset = Float32Array.from(source.mesh);
  let cx = 0, cy = 0;
  for (const i of OVAL) {
    cx += source.mesh[2 * i]! / OVAL.length;
    cy += source.mesh[2 * i + 1]! / OVAL.length;
  }
  for (let i = 0; i < inset.length; i += 2) {
    const dx = inset[i]! - cx, dy = inset[i + 1]! - cy;
    const limit = SOURCE_INSET * outlineExit(source.mesh, cx, cy, dx, dy);
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

// How far past the inner lips the source's mouth is filled, as a share of the polygon's size: the
// mesh's inner lip points sit on the teeth's edge as often as on the lips'.
const MOUTH_FILL_MARGIN = 0.25;
// The fill is the lips' colour this much darker, as the line where closed lips meet.
const MOUTH_SHADE = 0.75;

/**
 * The source photo with its mouth's inside (teeth, tongue, the dark between them) filled from the lips
 * around it. The target's mouth is always its own (see targetExpression), but the fade at its edge and
 * the photo's halvings (a coarser level averages the teeth into the lips around them) still carry the
 * source's: without the fill, more of the test clips' faces failed the judge (the pan at 25 fps, v2:
 * 67 % against 22 %, on sharpness, nose tint and speckles).
 */
function withMouthFilled(source: SourceFace, photo: Uint8Array): Uint8Array {
  const grown = grownPolygon(source.mesh, INNER_LIPS, MOUTH_FILL_MARGIN);
  const { minX, minY, maxX, maxY } = pointBounds(gather(grown, INNER_LIPS));
  const pad = Math.ceil(0.5 * (maxX - minX)) + 2;
  const x0 = Math.max(0, Math.floor(minX) - pad), y0 = Math.max(0, Math.floor(minY) - pad);
  const w = Math.min(source.width, Math.ceil(maxX) + pad) - x0, h = Math.min(source.height, Math.ceil(maxY) + pad) - y0;
  if (w < 2 || h < 2) return photo;
  const inside = scratch("mouthFill", w * h).fill(0);
  fillPolygon(inside, w, h, grown, INNER_LIPS, x0, y0, 1);
  const values = scratch("mouthFillValues", w * h * 4);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = y * w + x, p = ((y0 + y) * source.width + x0 + x) * 3;
      for (let c = 0; c < 3; c++) values[i * 4 + c] = inside[i] === 1 ? 0 : photo[p + c]!;
      values[i * 4 + 3] = 1 - inside[i]!;
    }
  }
  pushPull(values, w, h);
  const soft = boxBlur(boxBlur(inside, scratch("mouthFillSoft1", w * h), w, h, 1, 1), scratch("mouthFillSoft", w * h), w, h, 1, 1);
  const pixels = Uint8Array.from(photo);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = y * w + x, p = ((y0 + y) * source.width + x0 + x) * 3;
      const shade = 1 - (1 - MOUTH_SHADE) * soft[i]!;
      for (let c = 0; c < 3; c++) pixels[p + c] = Math.round(shade * values[i * 4 + c]!);
    }
  }
  return pixels;
}

/** The source photo made ready to sample (its mouth filled, what covers its face cleared) and its halvings. */
function pyramid(source: SourceFace, triangles: ArrayLike<number>, mirror: Int32Array): Level[] {
  let levels = pyramids.get(source);
  if (levels) return levels;
  const photo = withMouthFilled(source, withoutOccluders(source, triangles, mirror));
  levels = [{ pixels: photo, width: source.width, height: source.height }];
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

/**
 * Moves the new face's low frequencies to the target's: each of Y, Cb and Cr of both is blurred over
 * `radius` (weighted by `fromLit` for the new face and `skin` for the target, so hair, background,
 * open mouth, occluders, the features and the nostrils do not count), then, over `from`, the new
 * face's luma is scaled by the ratio of the two (shading and light) and its chroma replaced by the
 * target's (skin tone, a coloured light on the source photo). Detail finer than the blur stays the
 * new face's: on its skin (`fromSkin`) little of its chroma, on its features more.
 */
function relight(
  warped: Float32Array,
  target: Float32Array,
  from: Float32Array,
  fromSkin: Float32Array,
  fromLit: Float32Array,
  skin: Float32Array,
  w: number,
  h: number,
  style: StyleParams,
  radius: number,
): void {
  const n = w * h;
  const packed = scratch("light", n * 8).fill(0);
  for (let i = 0; i < n; i++) {
    const ws = fromLit[i]!, wt = skin[i]!;
    if (ws > 0) {
      toYCbCr(warped, i * 3);
      packed[i * 8] = ycbcr[0] * ws;
      packed[i * 8 + 1] = ycbcr[1] * ws;
      packed[i * 8 + 2] = ycbcr[2] * ws;
      packed[i * 8 + 3] = ws;
    }
    if (wt > 0) {
      toYCbCr(target, i * 3);
      packed[i * 8 + 4] = ycbcr[0] * wt;
      packed[i * 8 + 5] = ycbcr[1] * wt;
      packed[i * 8 + 6] = ycbcr[2] * wt;
      packed[i * 8 + 7] = wt;
    }
  }
  // Two box passes approach a Gaussian; one leaves visible steps where the face's edge enters the box.
  const field = boxBlur(boxBlur(packed, scratch("light1", n * 8), w, h, 8, radius), packed, w, h, 8, radius);
  for (let i = 0; i < n; i++) {
    if (from[i] === 0) continue;
    const ws = field[i * 8 + 3]!, wt = field[i * 8 + 7]!;
    if (ws < 1e-3 || wt < 1e-3) continue;
    const sy = field[i * 8]! / ws, ty = field[i * 8 + 4]! / wt;
    toYCbCr(warped, i * 3);
    const gain = Math.min(5, Math.max(0.2, (ty + 1) / (sy + 1)));
    const skin = fromSkin[i]!;
    // The source's specular highlights (a lit nose tip, forehead) are its light, not its face: on
    // skin, luma above the local level is compressed past HIGHLIGHT.
    const level = sy * HIGHLIGHT;
    if (skin > 0 && ycbcr[0] > level) ycbcr[0] -= skin * (1 - HIGHLIGHT_KEEP) * (ycbcr[0] - level);
    ycbcr[0] *= gain;
    const ownCb = field[i * 8 + 1]! / ws, ownCr = field[i * 8 + 2]! / ws;
    const toCb = field[i * 8 + 5]! / wt, toCr = field[i * 8 + 6]! / wt;
    let dCb = ycbcr[1] - ownCb, dCr = ycbcr[2] - ownCr;
    // On skin, chroma detail toward grey (less of the skin's colour, which is now the target's) is the
    // same highlight's: kept, it turns blue-mauve once the luma under it drops to the target's. Against
    // the source's own colour, a cool photo's nearly grey skin, its blue nose tip and nostrils stayed.
    const norm = Math.hypot(toCb, toCr);
    if (skin > 0 && norm > 1e-3) {
      const along = (dCb * toCb + dCr * toCr) / norm;
      if (along < 0) {
        dCb -= (skin * along * toCb) / norm;
        dCr -= (skin * along * toCr) / norm;
      }
    }
    // The detail scales with the luma under it, so the new face's colour keeps its saturation.
    const detail = gain * (skin * SKIN_CHROMA_DETAIL + (1 - skin) * style.chromaDetail);
    ycbcr[1] = toCb + detail * dCb;
    ycbcr[2] = toCr + detail * dCr;
    fromYCbCr(warped, i * 3);
  }
}

// Share of the source's chroma finer than the relight's blur that stays on its skin (the features
// keep the style's `chromaDetail`): a coloured light on the source photo changes across the face
// faster than that blur (a blue-lit nose tip, a warm cheek), and the skin's own fine chroma is small.
const SKIN_CHROMA_DETAIL = 0.15;

// Luma more than HIGHLIGHT times the source's local level keeps HIGHLIGHT_KEEP of the excess.
const HIGHLIGHT = 1.2;
const HIGHLIGHT_KEEP = 0.3;

// The target's highlights are measured against its skin's level blurred over this share of the face
// (a nose tip's highlight is narrower than the relight's blur, which averages it away).
const HIGHLIGHT_LEVEL = 0.06;
// Luma past the level that its chroma does not explain, as a share of the level: from the first the
// target's pixel starts to show through, from the second it shows alone (smoothly between). With 0.15
// and 0.35 the stairs' lit nose tip came out a smaller, hard-edged white spot; from 0.08 it fades
// out as the footage's does.
const HIGHLIGHT_EXCESS = [0.08, 0.4] as const;
// No highlight is taken within this share of the face of either face's eyes, brows and lips, nor as
// close to the face's outline: the stairs' shimmering eye shadow passed for one, and so did the
// whites of eyes the new face's features had moved away from, and light hair at a temple.
const HIGHLIGHT_MARGIN = 0.1;

/**
 * Lays the target's specular highlights (a lit nose tip, a shine on the forehead or a cheekbone) over
 * the new face. They are the footage's light on the target's shape, which the new face is drawn on;
 * the relight's blur averages them away, so a shiny face came out matte beside its own neck. A
 * highlight adds the light's colour on top of the skin's: its luma rises past the skin's level with
 * chroma that does not rise with it, where more light of the skin's colour (a lit cheek, a crease's
 * ridge) raises both, and stays the new face's.
 */
function targetHighlights(
  warped: Float32Array,
  target: Float32Array,
  skin: Float32Array,
  drawn: Float32Array,
  unlit: Float32Array,
  targetFeatures: Float32Array,
  drawnFeatures: Float32Array,
  w: number,
  h: number,
  faceSize: number,
): void {
  // Both fields are smooth, so they are made at half the patch's resolution (a quarter of the blurs'
  // work) and read back bilinearly.
  const hw = Math.ceil(w / 2), hh = Math.ceil(h / 2), hn = hw * hh;
  const level = scratch("highlightLevel", hn * 4).fill(0);
  const masks = scratch("highlightMasks", hn * 2).fill(0);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = y * w + x, c = (y >> 1) * hw + (x >> 1), q = c * 4;
      masks[c * 2]! += Math.max(targetFeatures[i]!, drawnFeatures[i]!);
      masks[c * 2 + 1]! += drawn[i]!;
      const wt = skin[i]!;
      if (wt <= 0) continue;
      toYCbCr(target, i * 3);
      level[q]! += wt * ycbcr[0];
      level[q + 1]! += wt * ycbcr[1];
      level[q + 2]! += wt * ycbcr[2];
      level[q + 3]! += wt;
    }
  }
  // A half-resolution cell sums up to four pixels: the masks' shares are of four.
  for (let c = 0; c < hn * 2; c++) masks[c]! *= 0.25;
  const radius = Math.max(0.5, (HIGHLIGHT_LEVEL * faceSize) / 2), margin = Math.max(0.5, (HIGHLIGHT_MARGIN * faceSize) / 2);
  boxBlur(boxBlur(level, scratch("highlightLevel1", hn * 4), hw, hh, 4, radius), level, hw, hh, 4, radius);
  boxBlur(masks, masks, hw, hh, 2, margin);
  // Per cell: the skin's level (luma, and chroma over its squared length), and where highlights may
  // be taken, fading out near the features and the outline.
  for (let c = 0, q = 0; c < hn; c++, q += 4) {
    const wt = level[q + 3]!;
    const ly = level[q]! / Math.max(wt, 1e-6), lcb = level[q + 1]! / Math.max(wt, 1e-6), lcr = level[q + 2]! / Math.max(wt, 1e-6);
    // Skin this grey gives no colour to tell a highlight from more light by.
    const chroma2 = lcb * lcb + lcr * lcr;
    const usable = wt >= 1e-3 && chroma2 >= 4;
    level[q] = ly;
    level[q + 1] = usable ? lcb / chroma2 : 0;
    level[q + 2] = usable ? lcr / chroma2 : 0;
    level[q + 3] = usable ? Math.max(0, 1 - 8 * masks[c * 2]!) * Math.max(0, Math.min(1, 4 * masks[c * 2 + 1]! - 3)) : 0;
  }
  const [from, to] = HIGHLIGHT_EXCESS;
  const at = highlightSample;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = y * w + x, p = i * 3;
      if (drawn[i]! <= 0 || unlit[i]! >= 1) continue;
      // Not halfway past the nearest cell's level (close to the interpolated one), a pixel is no
      // highlight: most are left here, before the interpolation.
      const near = level[((y >> 1) * hw + (x >> 1)) * 4]!;
      if (0.299 * target[p]! + 0.587 * target[p + 1]! + 0.114 * target[p + 2]! - near <= 0.5 * from * (near + 1)) continue;
      sampleField(level, hw, hh, (x + 0.5) / 2 - 0.5, (y + 0.5) / 2 - 0.5, at, 0);
      // Off the nose's base (its nostrils) too.
      const where = drawn[i]! * (1 - unlit[i]!) * at[3]!;
      if (where <= 0) continue;
      const ly = at[0]!;
      toYCbCr(target, p);
      // How much more of the skin's colour the pixel has than the level: the luma that explains.
      const more = ycbcr[1] * at[1]! + ycbcr[2] * at[2]!;
      const excess = (ycbcr[0] - ly * Math.max(1, more)) / (ly + 1);
      if (excess <= from) continue;
      const t = Math.min(1, (excess - from) / (to - from));
      const share = where * t * t * (3 - 2 * t);
      for (let c = 0; c < 3; c++) warped[p + c]! += share * (target[p + c]! - warped[p + c]!);
    }
  }
}

const highlightSample = new Float32Array(4);

/** Adds `amount` times the high-pass of `from` (itself minus its box blur of `radius`) to `to`. */
function addDetail(to: Float32Array, from: Float32Array, w: number, h: number, amount: number, radius: number): void {
  const blurred = boxBlur(from, scratch("detail", from.length), w, h, 3, radius);
  for (let i = 0; i < to.length; i++) to[i]! += amount * (from[i]! - blurred[i]!);
}

// The unsharp mask's change of luma saturates at this (smoothly): strong edges (lashes, the lips'
// line) would otherwise ring with bright and dark halos before fine skin detail came back.
const SHARPEN_LIMIT = 18;
// Share of the unsharp mask left off on the features: lashes, the eyes' edges and teeth are sharp
// already, and sharpened further their single dark or bright pixels became speckles.
const FEATURE_SHARPEN_DAMP = 0.3;

// The amounts matchedSharpening tries: from a light blur (skin only; the features are never
// softened) up to the style's fixed amounts.
const SHARPEN_STEP = 0.05;
const LEAST_SHARPEN = -0.5;
// The most the unsharp mask may multiply the energy of the new face's own finest band of skin by,
// whatever the footage shows. The footage's skin energy is its person's creases and pores as much as
// its camera's sharpness: matched to it, the stairs' lower-left face (deep creases in warm side light)
// took the most amount, 2.8, on every frame, which multiplied the young photo's skin texture by 8
// and more (the bench clip's faces by 8 at the median) into creases decades older than the photo.
// The sofa's sharp footage asks for 3.3-4.9, which stays.
const SKIN_TEXTURE_GAIN = 5;

/** Unsharp amounts on the new face's skin and on its features (see sharpenLuma). */
export interface Sharpening {
  skin: number;
  features: number;
}

/**
 * Unsharp amounts that leave the new face no crisper than the footage's face under it, on its skin
 * and on its features each, at most `most`: on each, the largest at which the energy of the new
 * face's finest band of luma (luma minus its radius-1 blur) stays within that region's `headroom`
 * times the footage's over the same pixels, well inside the drawn face (its outline is a step), and
 * on skin within SKIN_TEXTURE_GAIN times its own. Footage often has smooth skin and crisp eyes and
 * lips (make-up, a soft camera): one amount for both either etched the source photo's skin texture
 * into creases or left the features soft beside the hair, and the fixed 2.2 outlined the turned
 * clip's new faces, on soft footage, at twice the footage's Laplacian variance. (Matching instead the
 * ratio of that band to the next coarser one, a measure of blur that content does not move, left
 * every face soft: the warped photo's finest band is resampling texture more than edges.)
 */
export function matchedSharpening(
  warped: Float32Array, target: Float32Array, drawn: Float32Array, features: Float32Array, w: number, h: number, most: Sharpening, headroom: StyleParams["sharpenHeadroom"],
): Sharpening {
  const n = w * h;
  // Per pixel: the new face's luma and the footage's; then the new face's high-pass on skin and on features.
  const luma = scratch("sharpLuma", 2 * n), lumaBlurred = scratch("sharpLumaBlurred", 2 * n);
  for (let i = 0; i < n; i++) {
    luma[2 * i] = 0.299 * warped[3 * i]! + 0.587 * warped[3 * i + 1]! + 0.114 * warped[3 * i + 2]!;
    luma[2 * i + 1] = 0.299 * target[3 * i]! + 0.587 * target[3 * i + 1]! + 0.114 * target[3 * i + 2]!;
  }
  boxBlur(luma, lumaBlurred, w, h, 2, 1);
  const high = scratch("sharpHigh", 2 * n), highBlurred = scratch("sharpHighBlurred", 2 * n);
  for (let i = 0; i < n; i++) {
    const band = luma[2 * i]! - lumaBlurred[2 * i]!;
    high[2 * i] = (1 - features[i]!) * band;
    high[2 * i + 1] = features[i]! * band;
  }
  boxBlur(high, highBlurred, w, h, 2, 1);
  const inner = boxBlur(drawn, scratch("sharpInner", n), w, h, 1, 3);
  // Sharpened by a, the new face's finest band is f + a e. Per region (skin, features): ff, fe, ee, the footage's.
  const sums = [new Float64Array(4), new Float64Array(4)] as const;
  for (let i = 0; i < n; i++) {
    const feature = features[i]! > 0.5;
    if (inner[i]! < 0.999 || (!feature && features[i]! > 0.1)) continue;
    const channel = 2 * i + (feature ? 1 : 0);
    const f = luma[2 * i]! - lumaBlurred[2 * i]!, e = high[channel]! - highBlurred[channel]!;
    const sum = sums[feature ? 1 : 0];
    sum[0]! += f * f;
    sum[1]! += f * e;
    sum[2]! += e * e;
    sum[3]! += (luma[2 * i + 1]! - lumaBlurred[2 * i + 1]!) ** 2;
  }
  const amount = ([ff, fe, ee, footage]: Float64Array, least: number, limit: number, room: number, gain: number) => {
    if (!(ff! > 0)) return limit;
    const allowed = Math.min(room * footage!, gain * ff!);
    let best = least;
    for (let a = least; a <= limit + 1e-9 && ff! + 2 * a * fe! + a * a * ee! <= allowed; a += SHARPEN_STEP) best = a;
    return Math.min(limit, best);
  };
  return {
    skin: amount(sums[0], LEAST_SHARPEN, most.skin, headroom.skin, SKIN_TEXTURE_GAIN),
    features: amount(sums[1], 0, most.features, headroom.features, Infinity),
  };
}

/**
 * Unsharp mask on luma only (radius 1), by `amount.skin` on the skin and `amount.features` on the
 * features (mixed by the `features` mask): the same high-pass of luma added to each channel.
 * Sharpening each channel on its own also sharpens the warped source's chroma noise into coloured speckles.
 */
export function sharpenLuma(rgb: Float32Array, w: number, h: number, amount: Sharpening, features: Float32Array): void {
  const blurred = boxBlur(rgb, scratch("detail", rgb.length), w, h, 3, 1);
  for (let p = 0; p < rgb.length; p += 3) {
    const feature = features[p / 3]!;
    const high = (amount.skin * (1 - feature) + amount.features * feature) * (0.299 * (rgb[p]! - blurred[p]!) + 0.587 * (rgb[p + 1]! - blurred[p + 1]!) + 0.114 * (rgb[p + 2]! - blurred[p + 2]!));
    const d = SHARPEN_LIMIT * Math.tanh(high / SHARPEN_LIMIT);
    rgb[p]! += d;
    rgb[p + 1]! += d;
    rgb[p + 2]! += d;
  }
}

/**
 * Opacity from the covered area: blurred twice, then only its inner half kept (`fade`), so the face
 * fades in over `radius` pixels inside its outline and never bleeds outside it. Into scratch buffer `name`.
 */
function featherMask(covered: Float32Array, w: number, h: number, radius: number, name: string, fade: readonly [number, number] = [0.5, 1]): Float32Array {
  const once = boxBlur(covered, scratch("feather", covered.length), w, h, 1, radius);
  const blurred = boxBlur(once, scratch(name, covered.length), w, h, 1, radius);
  for (let i = 0; i < blurred.length; i++) {
    const t = Math.min(1, Math.max(0, (blurred[i]! - fade[0]) / (fade[1] - fade[0])));
    blurred[i] = t * t * (3 - 2 * t);
  }
  return blurred;
}
