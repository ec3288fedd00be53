import { crop, decodeFrames, grow } from "../../src/faceswap/render/images.js";
import { EYE_OPENINGS, OUTER_LIPS, OVAL } from "../../src/faceswap/render/mesh.js";
import { fillPolygon, pointBounds } from "../../src/faceswap/render/pixels.js";
import { analyseImage } from "../../src/faceswap/render/sources.js";
import type { SourceFace } from "../../src/faceswap/render/swap.js";
import type { WorkerPool } from "../../src/faceswap/render/worker-pool.js";
import { samplePhoto } from "./footage.js";

export interface HairOverFace {
  /** sample3's middle face (hair tied back: nothing over it), cropped as the renderer crops a source. */
  clean: SourceFace;
  /** The same with the dark hair beside the photo's right-hand face laid over it in discs at outline points. */
  covered: SourceFace;
  /** 1 on the pixels the hair was laid over. */
  hair: Uint8Array;
  /** Geometric mean of the clean mesh's width and height, pixels. */
  faceSize: number;
}

/**
 * Where the hair lies on the face: in a disc `radius` of the face wide around each of the mesh's
 * points `discs` (on its outline, so that it comes in from the face's edge as hair does), or inside
 * the mesh's `polygon` (indices in order around it: a region the same on both sides of the face
 * wherever it is turned, as a beard is).
 */
export type HairRegion = { discs: readonly number[]; radius: number } | { polygon: readonly number[] };

/** sample3's middle face cropped as the renderer crops a source, with its size; meshes from `pool`. */
export async function cleanFace(pool: WorkerPool): Promise<Pick<HairOverFace, "clean" | "faceSize">> {
  return (await sample3(pool)).middle;
}

async function sample3(pool: WorkerPool) {
  const photo = (await decodeFrames(samplePhoto(3), { maxLongSide: 1024, maxFrames: 1 })).frames[0]!;
  const faces = (await analyseImage(pool, photo, { minConfidence: 0.3, worker: 0, retryWithBorder: false })).sort((a, b) => a.box[0] - b.box[0]);
  if (faces.length !== 3) throw new Error(`sample3 should show 3 faces, found ${faces.length}`);
  const [, middle, right] = faces as [(typeof faces)[0], (typeof faces)[0], (typeof faces)[0]];
  const cropped = crop(photo, grow(middle.box, 0.2));
  const mesh = middle.mesh.map((v, i) => v - (i % 2 === 0 ? cropped.x : cropped.y));
  const clean = { pixels: cropped.pixels, width: cropped.width, height: cropped.height, mesh };
  const { minX, minY, maxX, maxY } = pointBounds(mesh);
  return { photo, right, middle: { clean, faceSize: Math.sqrt((maxX - minX) * (maxY - minY)) } };
}

/** A source face with hair over it in `region`, the eyes and lips left open, and the same face without (see HairOverFace); meshes from `pool`. */
export async function hairOverFace(pool: WorkerPool, region: HairRegion): Promise<HairOverFace> {
  const { photo, right, middle: { clean, faceSize } } = await sample3(pool);
  const { mesh } = clean;
  // The hair beside the right-hand face's cheek (left of its outline point 234).
  const fromX = right.mesh[2 * 234]! - 0.17 * faceSize, fromY = right.mesh[2 * 234 + 1]! - 0.1 * faceSize;
  const inside = new Float32Array(clean.width * clean.height);
  fillPolygon(inside, clean.width, clean.height, mesh, OVAL, 0, 0, 1);
  const open = new Float32Array(inside.length);
  for (const polygon of [...EYE_OPENINGS, OUTER_LIPS]) fillPolygon(open, clean.width, clean.height, mesh, polygon, 0, 0, 1);
  const where = new Float32Array(inside.length);
  if ("polygon" in region) fillPolygon(where, clean.width, clean.height, mesh, region.polygon, 0, 0, 1);
  else {
    const r = region.radius * faceSize;
    for (const point of region.discs) {
      const atX = mesh[2 * point]!, atY = mesh[2 * point + 1]!;
      for (let y = 0; y < clean.height; y++) {
        for (let x = 0; x < clean.width; x++) if ((x - atX) ** 2 + (y - atY) ** 2 <= r * r) where[y * clean.width + x] = 1;
      }
    }
  }
  // The hair beside that cheek falls in a narrow band: it is laid on in strips of that band's width,
  // side by side, from the top left of the region.
  const strip = Math.max(1, Math.round(0.1 * faceSize));
  let x0 = Infinity, y0 = Infinity;
  for (let i = 0; i < where.length; i++) {
    if (where[i] === 0) continue;
    x0 = Math.min(x0, i % clean.width);
    y0 = Math.min(y0, Math.floor(i / clean.width));
  }
  const pixels = Uint8Array.from(clean.pixels);
  const hair = new Uint8Array(inside.length);
  for (let y = 0; y < clean.height; y++) {
    for (let x = 0; x < clean.width; x++) {
      const i = y * clean.width + x;
      if (where[i] === 0 || inside[i] === 0 || open[i] === 1) continue;
      const sx = Math.round(fromX + ((x - x0) % strip)), sy = Math.round(fromY + y - y0);
      for (let c = 0; c < 3; c++) pixels[i * 3 + c] = photo.pixels[(sy * photo.width + sx) * 3 + c]!;
      hair[i] = 1;
    }
  }
  return { clean, covered: { ...clean, pixels }, hair, faceSize };
}
