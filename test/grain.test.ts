import { describe, expect, it } from "vitest";
import { grainLevel, matchGrain } from "../src/faceswap/render/grain.js";
import { sequence } from "./support/sequence.js";

const W = 64, H = 64;

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

  it("lays the footage's own grain, as it changes from frame to frame", () => {
    const clean = face(0, 1);
    for (const seed of [1, 7]) {
      const target = face(4, seed), warped = face(0, 2), before = Float32Array.from(warped);
      matchGrain(warped, target, allSkin(), W, H);
      const added: number[] = [], noise: number[] = [];
      for (let y = 1; y < H - 1; y++) {
        for (let x = 1; x < W - 1; x++) {
          const i = y * W + x;
          added.push(warped[3 * i + 1]! - before[3 * i + 1]!);
          noise.push(target[3 * i + 1]! - clean[3 * i + 1]!);
        }
      }
      expect(correlation(added, noise)).toBeGreaterThan(0.8);
    }
  });

  it("lays grain only where both faces are skin, and on none of the footage's marks or their edges", () => {
    const target = face(4, 1), warped = face(0, 2), before = Float32Array.from(warped);
    // A dark dot of make-up, 1 px, on the footage's skin.
    const dot = 40 * W + 40;
    for (let c = 0; c < 3; c++) target[3 * dot + c]! -= 80;
    const skin = allSkin();
    // The left half is not skin, nor a 5x5 block (an eye) on the right.
    for (let y = 0; y < H; y++) for (let x = 0; x < W / 2; x++) skin[y * W + x] = 0;
    for (let y = 20; y < 25; y++) for (let x = 50; x < 55; x++) skin[y * W + x] = 0;
    matchGrain(warped, target, skin, W, H);
    const unchanged = (x: number, y: number) => [0, 1, 2].every((c) => warped[3 * (y * W + x) + c] === before[3 * (y * W + x) + c]);
    const changed: string[] = [];
    // Off the skin, and a pixel from it: the residual there takes in the edge.
    for (let y = 0; y < H; y++) for (let x = 0; x <= W / 2; x++) if (!unchanged(x, y)) changed.push(`${x},${y}`);
    for (let y = 19; y <= 25; y++) for (let x = 49; x <= 55; x++) if (!unchanged(x, y)) changed.push(`${x},${y}`);
    expect(changed).toEqual([]);
    expect(unchanged(40, 40)).toBe(true);
    const right = (i: number) => i % W > W / 2 + 1;
    expect(levelOf(warped, right) / levelOf(target, right)).toBeGreaterThan(0.85);
  });

  it("leaves the face alone when the footage is grainy only off its skin", () => {
    const target = face(0, 1), warped = face(0, 2);
    const noisy = face(6, 3);
    for (let i = 0; i < W * H; i++) if (i % W < W / 2) for (let c = 0; c < 3; c++) target[3 * i + c] = noisy[3 * i + c]!;
    const skin = allSkin();
    for (let i = 0; i < W * H; i++) if (i % W < W / 2) skin[i] = 0;
    const before = Float32Array.from(warped);
    matchGrain(warped, target, skin, W, H);
    expect(warped).toEqual(before);
  });

  it("fades the grain in above a level of 2, so footage near it does not switch it on and off", () => {
    const laid = (sigma: number) => {
      const target = face(sigma, 1), warped = face(0, 2), before = Float32Array.from(warped);
      matchGrain(warped, target, allSkin(), W, H);
      let sum = 0;
      for (let i = 0; i < warped.length; i++) sum += (warped[i]! - before[i]!) ** 2;
      return Math.sqrt(sum / warped.length);
    };
    const levels = [1.9, 2.2, 2.5, 2.8, 3.2].map(laid);
    expect(levels[0]).toBe(0);
    for (let k = 1; k < levels.length; k++) expect(levels[k]!).toBeGreaterThan(levels[k - 1]!);
    // Halfway through the fade, well under the level's own share.
    expect(levels[2]! / 2.5).toBeLessThan(0.75 * (levels[4]! / 3.2));
  });
});

function correlation(a: number[], b: number[]): number {
  const mean = (v: number[]) => v.reduce((s, x) => s + x, 0) / v.length;
  const ma = mean(a), mb = mean(b);
  let ab = 0, aa = 0, bb = 0;
  for (let k = 0; k < a.length; k++) {
    ab += (a[k]! - ma) * (b[k]! - mb);
    aa += (a[k]! - ma) ** 2;
    bb += (b[k]! - mb) ** 2;
  }
  return ab / Math.sqrt(aa * bb);
}
