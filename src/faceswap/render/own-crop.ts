import type { Human, Point } from "@vladmandic/human";
import { meshCrops, roll, UPRIGHT_ROLL, type MeshCrop, type MeshFrame } from "./upright.js";

/**
 * The side of the crop a face is meshed from over the mesh's own extent: the mesh model's tracking
 * crop in MediaPipe, where the model comes from. Human sizes the crop from the detector's box instead
 * (1.4 times it); a face looking down, hair falling over its brow, had a box taller than its
 * features, and meshed from that crop its chin lay on the neck and its nose tip on the upper lip
 * (face-api's landmark model put her features up to 0.34 of the eye distance away). From its own
 * extent, her mesh met face-api's within 0.08-0.15 (1.6 and 1.7 times it: up to 0.26 and 0.34), and
 * the other faces of the test footage came within 0.03 of where they were either way.
 */
const CROP_OVER_EXTENT = 1.5;

/** A face as the mesh model read it: its confidence, its points in frame pixels and its roll (see roll). */
export interface MeshedFace {
  score: number;
  mesh: Point[];
  roll: number;
}

/** The angle a face's crop is turned by for the model: its roll, once past UPRIGHT_ROLL. */
function turnFor(faceRoll: number): number {
  return Math.abs(faceRoll) > UPRIGHT_ROLL ? faceRoll : 0;
}

/**
 * The square crop to mesh a face from, turned as turnFor(`faceRoll`) says: CROP_OVER_EXTENT times
 * the larger side of the mesh's bounds in that turned crop, about their centre.
 */
export function cropAround(mesh: readonly Point[], faceRoll: number): MeshCrop {
  const angle = turnFor(faceRoll);
  const cos = Math.cos(angle), sin = Math.sin(angle);
  let u0 = Infinity, v0 = Infinity, u1 = -Infinity, v1 = -Infinity;
  for (const [x, y] of mesh) {
    const u = x * cos + y * sin, v = y * cos - x * sin;
    u0 = Math.min(u0, u); u1 = Math.max(u1, u);
    v0 = Math.min(v0, v); v1 = Math.max(v1, v);
  }
  const side = CROP_OVER_EXTENT * Math.max(u1 - u0, v1 - v0);
  const u = (u0 + u1) / 2, v = (v0 + v1) / 2;
  return { cx: u * cos - v * sin, cy: u * sin + v * cos, width: side, height: side, angle };
}

/**
 * `faces`, meshed from the detector's crops, meshed again in one call of the model, each from the
 * crop its own mesh gives (see cropAround); `ownCrop` says which were. A face whose crop the model
 * does not read as a face of `minConfidence` keeps the mesh it had.
 */
export async function meshedFromOwnCrops(
  human: Human,
  frame: MeshFrame,
  faces: readonly MeshedFace[],
  mirror: Int32Array,
  minConfidence: number,
): Promise<Array<MeshedFace & { ownCrop: boolean }>> {
  const again = await meshCrops(human, frame, faces.map((face) => cropAround(face.mesh, face.roll)));
  return faces.map((face, k) => {
    // Rounded as Human rounds its scores, so a face at the bound is judged alike either way.
    const score = Math.round(100 * again[k]!.score) / 100;
    return score >= minConfidence ? { score, mesh: again[k]!.mesh, roll: roll(again[k]!.mesh, mirror), ownCrop: true } : { ...face, ownCrop: false };
  });
}
