import type { Human } from "@vladmandic/human";
import { beforeAll, describe, expect, it } from "vitest";
import { loadHuman } from "../src/faceswap/render/human.js";
import { mirrorPoints } from "../src/faceswap/render/mirror.js";
import { withoutOccluders } from "../src/faceswap/render/source-occluders.js";
import type { SourceFace } from "../src/faceswap/render/swap.js";
import { WorkerPool } from "../src/faceswap/render/worker-pool.js";
import { createLogger } from "../src/platform/logger.js";
import { hairOverFace } from "./support/hair.js";

let human: Human;
let mirror: Int32Array;
let clean: SourceFace, covered: SourceFace;
let hair: Uint8Array;
let faceSize: number;

beforeAll(async () => {
  const pool = await WorkerPool.start(1, createLogger("silent"));
  try {
    [human, { clean, covered, hair, faceSize }] = await Promise.all([loadHuman(), hairOverFace(pool)]);
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
    const out = withoutOccluders(clean, clean.pixels, human.faceTriangulation, mirror);
    expect(difference(out, clean.pixels, () => true)).toBe(0);
  });

  it("has the hair over its temple replaced by skin like the face's own, and nothing else changed", () => {
    const out = withoutOccluders(covered, covered.pixels, human.faceTriangulation, mirror);
    const painted = difference(covered.pixels, clean.pixels, (i) => hair[i] === 1);
    const left = difference(out, clean.pixels, (i) => hair[i] === 1);
    // The hair is far from the skin under it; what replaces it is near that skin.
    expect(painted).toBeGreaterThan(50);
    expect(left).toBeLessThan(0.3 * painted);
    const near = grown(hair, clean.width, 0.08 * faceSize);
    expect(difference(out, covered.pixels, (i) => near[i] === 0)).toBe(0);
  });
});
