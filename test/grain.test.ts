import { describe, expect, it } from "vitest";
import { grainLevel, matchGrain } from "../src/faceswap/render/grain.js";

const W = 64, H = 64;

/** A fixed sequence in [0, 1), so a failure is the same on every run. */
function sequence(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** Skin-toned rgb floats shaded from left to right, with grey noise of about `sigma` (uniform, sigma * sqrt(3) either way). */
function face(sigma: number, seed: number): Float32Array {
  const next = sequence(seed);
  const rgb = new Float32Array(W * H * 3);
  for (let i = 0; i < W * H; i++) {
    const shade = 150 + (i % W) * 0.5, n = (next() * 2 - 1) * sigma * Math.sqrt(3);
    rgb[3 * i] = shade + 40 + n;
    rgb[3 * i + 1] = shade + n;
    rgb[3 * i + 2] = shade - 30 + n;
  }
  return rgb;
}

function levelOf(rgb: Float32Array, where: (i: number) => boolean = () => true): number {
  const luma = Float32Array.from({ length: W * H }, (_, i) => 0.299 * rgb[3 * i]! + 0.587 * rgb[3 * i + 1]! + 0.114 * rgb[3 * i + 2]!);
  return grainLevel(luma, W, H, where)!;
}

const allSkin = () => new Float32Array(W * H).fill(1);

describe("matchGrain", () => {
  it("lays the footage's grain on a clean new face, up to the footage's level", () => {
    const target = face(4, 1), warped = face(0, 2);
    expect(levelOf(target)).toBeGreaterThan(3);
    expect(levelOf(warped)).toBeLessThan(0.5);
    matchGrain(warped, target, allSkin(), W, H);
    expect(levelOf(warped) / levelOf(target)).toBeGreaterThan(0.85);
    expect(levelOf(warped) / levelOf(target)).toBeLessThan(1.15);
  });

  it("makes up only what the new face lacks", () => {
    const target = face(4, 1), warped = face(3, 2);
    matchGrain(warped, target, allSkin(), W, H);
    // Independent noises add as squares: 3 and the 2.6 laid on make about 4.
    expect(levelOf(warped) / levelOf(target)).toBeGreaterThan(0.85);
    expect(levelOf(warped) / levelOf(target)).toBeLessThan(1.2);
  });

  it("leaves a new face alone on clean footage, or on footage no grainier than it", () => {
    for (const [footage, own] of [[1, 0], [4, 5]] as const) {
      const target = face(footage, 1), warped = face(own, 2), before = Float32Array.from(warped);
      matchGrain(warped, target, allSkin(), W, H);
      expect(warped).toEqual(before);
    }
  });

  it("lays grain only where both faces are skin, and no mark of the footage's", () => {
    const target = face(4, 1), warped = face(0, 2), before = Float32Array.from(warped);
    // A dark dot of make-up, 1 px, on the footage's skin.
    const dot = 40 * W + 40;
    for (let c = 0; c < 3; c++) target[3 * dot + c]! -= 80;
    const skin = allSkin();
    for (let y = 0; y < H; y++) for (let x = 0; x < W / 2; x++) skin[y * W + x] = 0;
    matchGrain(warped, target, skin, W, H);
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W / 2; x++) for (let c = 0; c < 3; c++) expect(warped[3 * (y * W + x) + c]).toBe(before[3 * (y * W + x) + c]);
    }
    expect(warped[3 * dot]).toBe(before[3 * dot]);
    const right = (i: number) => i % W > W / 2;
    expect(levelOf(warped, right) / levelOf(target, right)).toBeGreaterThan(0.85);
  });
});
