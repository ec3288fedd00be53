import type { Human } from "@vladmandic/human";
import { beforeAll, describe, expect, it } from "vitest";
import { loadHuman } from "../src/faceswap/render/human.js";
import { mirrorPoints } from "../src/faceswap/render/mirror.js";
import { withoutOccluders } from "../src/faceswap/render/source-occluders.js";
import { WorkerPool } from "../src/faceswap/render/worker-pool.js";
import { createLogger } from "../src/platform/logger.js";
import { type HairOverFace, hairOverFace } from "./support/hair.js";

let human: Human;
let mirror: Int32Array;
// The outline from the right-hand mouth corner's level down round the chin to the left-hand one's (288
// to 58), and the lower lip from the left-hand corner to the right-hand one (61 to 291).
const JAW = [288, 397, 365, 379, 378, 400, 377, 152, 148, 176, 149, 150, 136, 172, 58];
const LOWER_LIP = [61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291];
/** Hair over one temple (outline point 54), over one side of the chin below the mouth, and a beard (the chin on both sides). */
let temple: HairOverFace, jaw: HairOverFace, beard: HairOverFace;

beforeAll(async () => {
  const pool = await WorkerPool.start(1, createLogger("silent"));
  try {
    [human, temple, jaw, beard] = await Promise.all([
      loadHuman(),
      hairOverFace(pool, { discs: [54], radius: 0.22 }),
      hairOverFace(pool, { polygon: [...JAW.slice(7, 15), ...LOWER_LIP.slice(0, 6)] }),
      hairOverFace(pool, { polygon: [...JAW, ...LOWER_LIP] }),
    ]);
  } finally {
    await pool.close();
  }
  mirror = mirrorPoints(human.faceUVMap);
});

/** Mean absolute difference per channel of `a` and `b` over the pixels `where` picks. */
function difference(a: Uint8Array, b: Uint8Array, where: (i: number) => boolean): number {
  let sum = 0, count = 0;
  for (let i = 0; i < a.length / 3; i++) {
    if (!where(i)) continue;
    for (let c = 0; c < 3; c++) sum += Math.abs(a[i * 3 + c]! - b[i * 3 + c]!);
    count += 3;
  }
  return sum / Math.max(1, count);
}

const luma = (pixels: Uint8Array, i: number) => 0.299 * pixels[i * 3]! + 0.587 * pixels[i * 3 + 1]! + 0.114 * pixels[i * 3 + 2]!;

/** Mean luma of the pixels `mask` marks. */
function meanLuma(pixels: Uint8Array, mask: Uint8Array): number {
  let sum = 0, count = 0;
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] === 0) continue;
    sum += luma(pixels, i);
    count++;
  }
  return sum / count;
}

/** Share of the pixels `mask` marks darker than `limit`. */
function darkShare(pixels: Uint8Array, mask: Uint8Array, limit: number): number {
  let dark = 0, count = 0;
  for (let i = 0; i < mask.length; i++) {
    if (mask[i] === 0) continue;
    if (luma(pixels, i) < limit) dark++;
    count++;
  }
  return dark / count;
}

/** 1 on the pixels within `distance` (pixels) of one `mask` picks. */
function grown(mask: Uint8Array, width: number, distance: number): Uint8Array {
  const out = new Uint8Array(mask.length);
  const height = mask.length / width, r = Math.ceil(distance);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (mask[y * width + x] === 0) continue;
      for (let v = Math.max(0, y - r); v <= Math.min(height - 1, y + r); v++) {
        for (let u = Math.max(0, x - r); u <= Math.min(width - 1, x + r); u++) out[v * width + u] = 1;
      }
    }
  }
  return out;
}

describe("a source photo's face with something over it", () => {
  it("is left as it is when nothing covers it", () => {
    const { clean } = temple;
    const out = withoutOccluders(clean, human.faceTriangulation, mirror);
    expect(difference(out, clean.pixels, () => true)).toBe(0);
  });

  it.each([
    ["over its temple", () => temple],
    ["at one side of its jaw, below the mouth", () => jaw],
  ])("has the hair %s replaced by skin, and nothing else changed", (_, example) => {
    const { clean, covered, hair, faceSize } = example();
    const out = withoutOccluders(covered, human.faceTriangulation, mirror);
    // The hair is dark against the skin it lies on; what replaces it is not. Its light is the skin's
    // around it, not that of the skin under the hair, which nothing in the photo shows (the jaw's lies
    // in the shade of the smile, 30 levels below the skin around it).
    const skin = meanLuma(clean.pixels, hair);
    expect(darkShare(covered.pixels, hair, skin / 2)).toBeGreaterThan(0.95);
    expect(darkShare(out, hair, skin / 2)).toBeLessThan(0.02);
    expect(Math.abs(meanLuma(out, hair) - skin)).toBeLessThan(0.4 * Math.abs(meanLuma(covered.pixels, hair) - skin));
    const near = grown(hair, clean.width, 0.1 * faceSize);
    expect(difference(out, covered.pixels, (i) => near[i] === 0)).toBe(0);
  });

  it("keeps a beard: what covers the face below the nose on both sides is the face's own", () => {
    const { covered } = beard;
    const out = withoutOccluders(covered, human.faceTriangulation, mirror);
    expect(difference(out, covered.pixels, () => true)).toBe(0);
  });
});
