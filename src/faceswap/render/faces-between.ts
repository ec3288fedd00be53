import type { FaceData } from "./protocol.js";
import { pairByOverlap } from "./tracker.js";

/**
 * The faces of a frame that was not meshed, `t` (0..1) of the way from the meshed frame before it
 * (`before`) to the one after (`after`): each face of `before` paired with the face of `after` its box
 * overlaps most has its box, mesh and depth taken `t` of the way from one to the other. Between frames
 * a twenty-fifth of a second apart a face's landmarks move almost in a straight line, so the middle of
 * two meshes is nearly where the mesh model would have put them, and it cannot jitter. A face of one
 * frame only (it came in or left, or a new scene began in between) is drawn as that frame has it on
 * the frames nearer that one.
 */
export function facesBetween(before: readonly FaceData[], after: readonly FaceData[], t: number): FaceData[] {
  const paired = pairByOverlap(before.map((face) => face.box), after.map((face) => face.box));
  const pairedAfter = new Set(paired);
  const faces: FaceData[] = [];
  before.forEach((a, i) => {
    const j = paired[i];
    if (j !== undefined) faces.push(mix(a, after[j]!, t));
    else if (t < 0.5) faces.push(a);
  });
  after.forEach((b, j) => {
    if (!pairedAfter.has(j) && t >= 0.5) faces.push(b);
  });
  return faces;
}

function mix(a: FaceData, b: FaceData, t: number): FaceData {
  const lerp = (x: number, y: number) => x + t * (y - x);
  return {
    box: [lerp(a.box[0], b.box[0]), lerp(a.box[1], b.box[1]), lerp(a.box[2], b.box[2]), lerp(a.box[3], b.box[3])],
    score: Math.min(a.score, b.score),
    mesh: a.mesh.map((v, k) => lerp(v, b.mesh[k]!)),
    depth: a.depth.map((v, k) => lerp(v, b.depth[k]!)),
  };
}
