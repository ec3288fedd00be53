import { EYE_OPENINGS } from "../../src/faceswap/render/eyes.js";
import { crop, decodeFrames, grow } from "../../src/faceswap/render/images.js";
import { OVAL } from "../../src/faceswap/render/mesh.js";
import { fillPolygon, pointBounds } from "../../src/faceswap/render/pixels.js";
import { analyseImage } from "../../src/faceswap/render/sources.js";
import type { SourceFace } from "../../src/faceswap/render/swap.js";
import type { WorkerPool } from "../../src/faceswap/render/worker-pool.js";
import { samplePhoto } from "./footage.js";

export interface HairOverFace {
  /** sample3's middle face (hair tied back: nothing over it), cropped as the renderer crops a source. */
  clean: SourceFace;
  /** The same with the dark hair beside the photo's right-hand face laid over one temple, from the face's edge. */
  covered: SourceFace;
  /** 1 on the pixels the hair was laid over. */
  hair: Uint8Array;
  /** Geometric mean of the clean mesh's width and height, pixels. */
  faceSize: number;
}

/** A source face with hair over it and the same face without (see HairOverFace); meshes from `pool`. */
export async function hairOverFace(pool: WorkerPool): Promise<HairOverFace> {
  const photo = (await decodeFrames(samplePhoto(3), { maxLongSide: 1024, maxFrames: 1 })).frames[0]!;
  const faces = (await analyseImage(pool, photo, { minConfidence: 0.3, worker: 0, retryWithBorder: false })).sort((a, b) => a.box[0] - b.box[0]);
  if (faces.length !== 3) throw new Error(`sample3 should show 3 faces, found ${faces.length}`);
  const [, middle, right] = faces as [(typeof faces)[0], (typeof faces)[0], (typeof faces)[0]];
  const region = crop(photo, grow(middle.box, 0.2));
  const mesh = middle.mesh.map((v, i) => v - (i % 2 === 0 ? region.x : region.y));
  const clean = { pixels: region.pixels, width: region.width, height: region.height, mesh };
  const { minX, minY, maxX, maxY } = pointBounds(mesh);
  const faceSize = Math.sqrt((maxX - minX) * (maxY - minY));
  // The hair beside the right-hand face's cheek (left of its outline point 234), moved onto the middle
  // face's temple (outline point 54) and laid over the face inside a disc there, the eyes left open.
  const fromX = right.mesh[2 * 234]! - 0.12 * faceSize, fromY = right.mesh[2 * 234 + 1]! - 0.1 * faceSize;
  const atX = mesh[2 * 54]!, atY = mesh[2 * 54 + 1]!;
  const inside = new Float32Array(clean.width * clean.height);
  fillPolygon(inside, clean.width, clean.height, mesh, OVAL, 0, 0, 1);
  const eyes = new Float32Array(inside.length);
  for (const opening of EYE_OPENINGS) fillPolygon(eyes, clean.width, clean.height, mesh, opening, 0, 0, 1);
  const pixels = Uint8Array.from(clean.pixels);
  const hair = new Uint8Array(inside.length);
  const radius = 0.22 * faceSize;
  for (let y = 0; y < clean.height; y++) {
    for (let x = 0; x < clean.width; x++) {
      const i = y * clean.width + x;
      if ((x - atX) ** 2 + (y - atY) ** 2 > radius * radius || inside[i] === 0 || eyes[i] === 1) continue;
      const sx = Math.round(fromX + x - atX), sy = Math.round(fromY + y - atY);
      for (let c = 0; c < 3; c++) pixels[i * 3 + c] = photo.pixels[(sy * photo.width + sx) * 3 + c]!;
      hair[i] = 1;
    }
  }
  return { clean, covered: { ...clean, pixels }, hair, faceSize };
}
