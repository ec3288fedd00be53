import { EYE_LIDS, EYE_OPENINGS, LIPS, NOSE_BASE, OUTER_LIPS } from "./mesh.js";
import { boxBlur, fillPolygon, grownPolygon, sampleCubic } from "./pixels.js";
import { scratch } from "./scratch.js";

// Width of the fade across an eye opening's edge, as a share of the face (at least half a pixel).
const EYE_EDGE = 0.012;
// Share of the opening (scaled about its centre) that is the target's: at 0.8 the pan's middle face
// (looking down, white eye make-up on its lids) kept a grey glow in its eyes.
const EYE_CORE = 0.6;
// How far past its outer lips the target's mouth is drawn (a share of the lips' size, about their
// centre), and the width of the fade across that edge (a share of the face): the mesh's lip outline is
// a pixel or two off the lips' edge as often as not, and the fade lies on skin, where the relit new
// face and the target's match. At 0.25 the recognisers found less of the new face (the pan, v2:
// face-api 0.096 against 0.109) and the mouth looked no different.
const LIP_MARGIN = 0.1;
const LIP_EDGE = 0.02;
// The nose's base (its wings and nostrils, NOSE_BASE) is the target's as it is, and the width of the
// fade across its edge (a share of the face). The photo's nostrils, drawn through a nose seen from
// below or turned (sample5's stairs), laid dark grey triangles along its wings and under its tip; the
// target's own are the shape its nose has in that frame. face-api found more of the new face so (the
// bench clip, v2: 0.095 to 0.110; the stairs 0.018 to 0.043), faceres about as much.
const NOSE_EDGE = 0.03;
// Width of the fade around lowered lids, a share of the face: it lies on the lids' skin and the
// cheek, where the relit new face and the target's skin match. Lowered, the lids are drawn a little
// past each edge (EYE_LIDS): with only the opening grown by 30 or 60 % the target's, the photo's upper
// lid and lashes around it still drew an eye, narrowed and looking at the camera.
const LOWERED_EDGE = 0.03;
/**
 * How far lowered lids (EYE_LIDS) are grown about their middle before they are drawn. On sample2's
 * woman looking down, her eyes nearly shut, the photo's socket around the lids drew a dark ring, and
 * her pale lid inside it read as an open eye staring out; grown by 40 %, her lids and lashes read as
 * the closed eyes they are (by 30 % a ring still showed). More of the target is drawn so: the test
 * clips' faceres and face-api shifts toward the new face moved by 0.03 at most (grown by 60 %, by up
 * to 0.07).
 */
export const LOWERED_GROW = 0.4;

/** Regions of the target drawn into the new face: each of `outlines` grown by `grow`, faded over `edge`. */
interface Part {
  /** Also names the part's scratch buffers. */
  name: string;
  outlines: readonly (readonly number[])[];
  grow: number;
  edge: number;
  /** Per outline, the points the map from the drawn mesh back to the target's is fitted on. */
  fitted: readonly (readonly number[])[];
  /** Whether the part is drawn only as far as the target's lids are lowered (else wholly). */
  lids?: true;
}

const PARTS: readonly Part[] = [
  { name: "eyes", outlines: EYE_OPENINGS, grow: EYE_CORE - 1, edge: EYE_EDGE, fitted: EYE_OPENINGS },
  // After the openings' middles, which it covers wholly once the lids are fully lowered: one map
  // then carries the whole eye, and two slightly different ones never show a lash line twice.
  { name: "lowered", outlines: EYE_LIDS, grow: LOWERED_GROW, edge: LOWERED_EDGE, fitted: EYE_LIDS, lids: true },
  { name: "lips", outlines: [OUTER_LIPS], grow: LIP_MARGIN, edge: LIP_EDGE, fitted: [LIPS] },
  { name: "nose", outlines: [NOSE_BASE], grow: 0, edge: NOSE_EDGE, fitted: [NOSE_BASE] },
];

/**
 * Lays the target's eye openings, lips and nose's base (from the rgb24 `frame`, `width` wide) into
 * the new face `face` (rgb floats over the patch at `x0, y0`, w x h) where `drawnMesh` puts them,
 * softly: each is carried from where the target's mesh has it to where the drawn one does by the
 * least-squares affine map between their points (the reshape moves and widens each eye and the
 * mouth as one piece, which that map undoes exactly), sampled bicubically (bilinear, the eyes came
 * out softer than the face around them). The eyes and lips are the target's expression (the nose's
 * base is there for its shape, see NOSE_EDGE): the new face's open eyes drawn into a smiling,
 * squinting target's lids showed as pale rings and stared while the target blinked, and a smiling
 * photo's lips, stretched over a closed mouth, drew a smirk with a dark line of filled teeth on a
 * face that did not smile. Only the eye opening's middle (EYE_CORE) is the target's: on lids nearly
 * closed (a face looking down) the mesh's opening takes in the lids' edges, and the target's eye
 * make-up came with them as a pale glow. Lids lowered (`lowered`, 0..1, see lidsLowered) bring the
 * target's whole eyes, lids and all, that far: the mesh reads such lids as open, and the photo's
 * open eyes drawn round the target's lashes made a face looking down stare at the camera.
 */
export function targetExpression(
  face: Float32Array,
  frame: Uint8Array,
  width: number,
  height: number,
  targetMesh: Float32Array,
  drawnMesh: Float32Array,
  { x0, y0, w, h, faceSize }: { x0: number; y0: number; w: number; h: number; faceSize: number },
  lowered: number,
): void {
  const sample = scratch("expressionSample", 3);
  for (const { name, outlines, grow, edge, fitted, lids } of PARTS) {
    const strength = lids ? lowered : 1;
    if (strength <= 0) continue;
    const radius = Math.max(0.5, edge * faceSize);
    // Each outline is drawn over its box, padded for the grown outline and its fade; the mask and its
    // fade cover those boxes only (over the whole patch, a fill and a blur per part cost as much as
    // the drawing: the stairs' five faces, 10 ms of a frame's 50).
    const boxes = outlines.map((outline) => {
      let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
      for (const i of outline) {
        minX = Math.min(minX, drawnMesh[2 * i]!); maxX = Math.max(maxX, drawnMesh[2 * i]!);
        minY = Math.min(minY, drawnMesh[2 * i + 1]!); maxY = Math.max(maxY, drawnMesh[2 * i + 1]!);
      }
      const pad = Math.ceil(radius + Math.max(0, grow) * Math.max(maxX - minX, maxY - minY)) + 2;
      return {
        x0: Math.max(0, Math.floor(minX - x0) - pad), x1: Math.min(w - 1, Math.ceil(maxX - x0) + pad),
        y0: Math.max(0, Math.floor(minY - y0) - pad), y1: Math.min(h - 1, Math.ceil(maxY - y0) + pad),
      };
    });
    const bx = Math.min(...boxes.map((b) => b.x0)), by = Math.min(...boxes.map((b) => b.y0));
    const bw = Math.max(...boxes.map((b) => b.x1)) - bx + 1, bh = Math.max(...boxes.map((b) => b.y1)) - by + 1;
    if (bw <= 0 || bh <= 0) continue;
    const mask = scratch(name, bw * bh).fill(0);
    for (const outline of outlines) fillPolygon(mask, bw, bh, grownPolygon(drawnMesh, outline, grow), outline, x0 + bx, y0 + by, strength);
    const soft = boxBlur(mask, scratch(`${name}Soft`, bw * bh), bw, bh, 1, radius);
    outlines.forEach((_, k) => {
      const back = fitAffine(drawnMesh, targetMesh, fitted[k]!);
      const box = boxes[k]!;
      for (let y = box.y0; y <= box.y1; y++) {
        for (let x = box.x0; x <= box.x1; x++) {
          const a = soft[(y - by) * bw + x - bx]!;
          if (a <= 0) continue;
          const i = y * w + x;
          const px = x0 + x + 0.5, py = y0 + y + 0.5;
          const tx = back[0] * px + back[1] * py + back[2] - 0.5, ty = back[3] * px + back[4] * py + back[5] - 0.5;
          sampleCubic(frame, width, height, tx, ty, sample, 0);
          for (let c = 0; c < 3; c++) face[i * 3 + c] = face[i * 3 + c]! + a * (sample[c]! - face[i * 3 + c]!);
        }
      }
    });
  }
}

// Points whose scatter's determinant is below this share of its trace squared lie almost on a line
// (an eye half a pixel open in a face 60 pixels wide).
const THIN = 1e-3;

/**
 * The least-squares affine map [a b c; d e f] that lays the points `indices` of `from` over the same
 * points of `to` (x, y pairs); only the shift between their centres where they lie almost on a line
 * (see THIN).
 */
function fitAffine(from: Float32Array, to: Float32Array, indices: readonly number[]): [number, number, number, number, number, number] {
  const n = indices.length;
  let fx = 0, fy = 0, tx = 0, ty = 0;
  for (const i of indices) {
    fx += from[2 * i]! / n; fy += from[2 * i + 1]! / n;
    tx += to[2 * i]! / n; ty += to[2 * i + 1]! / n;
  }
  let sxx = 0, sxy = 0, syy = 0, uxx = 0, uxy = 0, uyx = 0, uyy = 0;
  for (const i of indices) {
    const ax = from[2 * i]! - fx, ay = from[2 * i + 1]! - fy, bx = to[2 * i]! - tx, by = to[2 * i + 1]! - ty;
    sxx += ax * ax; sxy += ax * ay; syy += ay * ay;
    uxx += bx * ax; uxy += bx * ay; uyx += by * ax; uyy += by * ay;
  }
  const det = sxx * syy - sxy * sxy;
  // A closed eye's lid points lie on a line: no map across it can be told from them.
  if (det <= THIN * (sxx + syy) ** 2) return [1, 0, tx - fx, 0, 1, ty - fy];
  // [a b; d e] = U S^-1, with S the points' scatter and U the cross-scatter.
  const a = (uxx * syy - uxy * sxy) / det, b = (uxy * sxx - uxx * sxy) / det;
  const d = (uyx * syy - uyy * sxy) / det, e = (uyy * sxx - uyx * sxy) / det;
  return [a, b, tx - a * fx - b * fy, d, e, ty - d * fx - e * fy];
}
