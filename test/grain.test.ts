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

/** matchGrain on a patch at (x0, y0) of the frame, drawn where `drawn` is (by default where `skin` is). */
function lay(warped: Float32Array, target: Float32Array, skin: Float32Array, drawn = skin, x0 = 0, y0 = 0): void {
  matchGrain(warped, target, skin, drawn, { x0, y0, w: W, h: H });
}

describe("matchGrain", () => {
  it("lays the footage's grain on a clean new face, up to the footage's level", () => {
    const target = face(4, 1), warped = face(0, 2);
    expect(levelOf(target)).toBeGreaterThan(3);
    expect(levelOf(warped)).toBeLessThan(0.5);
    lay(warped, target, allSkin());
    expect(levelOf(warped) / levelOf(target)).toBeGreaterThan(0.85);
    expect(levelOf(warped) / levelOf(target)).toBeLessThan(1.15);
  });

  it("makes up only what the new face lacks", () => {
    const target = face(4, 1), warped = face(3, 2);
    lay(warped, target, allSkin());
    // Independent noises add as squares: 3 and the 2.6 laid on make about 4.
    expect(levelOf(warped) / levelOf(target)).toBeGreaterThan(0.85);
    expect(levelOf(warped) / levelOf(target)).toBeLessThan(1.2);
  });

  it("counts the footage's own grain the new face carries already (v1's footage detail) as the same noise, not another", () => {
    const target = face(4, 1), clean = face(0, 1), warped = face(0, 2);
    // 40 % of the footage's noise laid on already: with it, the face is at 0.4 of the footage's level,
    // and what is laid on must add to it, not as an independent noise would (which made 1.3 of it).
    for (let i = 0; i < warped.length; i++) warped[i]! += 0.4 * (target[i]! - clean[i]!);
    lay(warped, target, allSkin());
    expect(levelOf(warped) / levelOf(target)).toBeGreaterThan(0.85);
    expect(levelOf(warped) / levelOf(target)).toBeLessThan(1.15);
  });

  it("leaves a new face alone on clean footage, or on footage no grainier than it", () => {
    for (const [footage, own] of [[1, 0], [4, 5]] as const) {
      const target = face(footage, 1), warped = face(own, 2), before = Float32Array.from(warped);
      lay(warped, target, allSkin());
      expect(warped).toEqual(before);
    }
  });

  it("lays the footage's own grain, as it changes from frame to frame", () => {
    const clean = face(0, 1);
    for (const seed of [1, 7]) {
      const target = face(4, seed), warped = face(0, 2), before = Float32Array.from(warped);
      lay(warped, target, allSkin());
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

  it("takes grain only from the skin of both faces, never from the footage's marks, and lays it on all of the new face", () => {
    const target = face(4, 1), warped = face(0, 2), before = Float32Array.from(warped);
    // A dark dot of make-up, 1 px, on the footage's skin.
    const dot = 40 * W + 40;
    for (let c = 0; c < 3; c++) target[3 * dot + c]! -= 80;
    const skin = allSkin();
    // The left half is not skin, nor a 5x5 block (an eye, or the new face's lips) on the right. The new
    // face is drawn on the right half only.
    for (let y = 0; y < H; y++) for (let x = 0; x < W / 2; x++) skin[y * W + x] = 0;
    for (let y = 20; y < 25; y++) for (let x = 50; x < 55; x++) skin[y * W + x] = 0;
    const drawn = Float32Array.from({ length: W * H }, (_, i) => (i % W >= W / 2 ? 1 : 0));
    lay(warped, target, skin, drawn);
    const added = (x: number, y: number) => warped[3 * (y * W + x) + 1]! - before[3 * (y * W + x) + 1]!;
    const changed: string[] = [];
    for (let y = 0; y < H; y++) for (let x = 0; x < W / 2; x++) if ([0, 1, 2].some((c) => warped[3 * (y * W + x) + c] !== before[3 * (y * W + x) + c])) changed.push(`${x},${y}`);
    expect(changed).toEqual([]);
    // The dot and the pixels around it carry grain, not the dot: its residual is -50 or so in luma.
    for (let y = 39; y <= 41; y++) for (let x = 39; x <= 41; x++) expect(Math.abs(added(x, y))).toBeLessThan(16);
    // The block that is not skin has grain as strong as the skin around it.
    const rms = (xs: readonly [number, number], ys: readonly [number, number]) => {
      let sum = 0, n = 0;
      for (let y = ys[0]; y < ys[1]; y++) for (let x = xs[0]; x < xs[1]; x++, n++) sum += added(x, y) ** 2;
      return Math.sqrt(sum / n);
    };
    const block = rms([50, 55], [20, 25]), around = rms([W / 2 + 2, W - 1], [1, H - 1]);
    expect(block / around).toBeGreaterThan(0.6);
    expect(block / around).toBeLessThan(1.5);
    const right = (i: number) => i % W > W / 2 + 1;
    expect(levelOf(warped, right) / levelOf(target, right)).toBeGreaterThan(0.85);
  });

  it("lays no grain on the new face's own edges", () => {
    const target = face(4, 1), warped = face(0, 2);
    // A band that is not skin (the new face's brow, say) with a sharp line down its middle.
    const skin = allSkin();
    for (let y = 0; y < H; y++) for (let x = 28; x < 37; x++) skin[y * W + x] = 0;
    for (let y = 0; y < H; y++) for (let c = 0; c < 3; c++) warped[3 * (y * W + 32) + c]! -= 60;
    const before = Float32Array.from(warped);
    lay(warped, target, skin, allSkin());
    const added = (x: number, y: number) => warped[3 * (y * W + x) + 1]! - before[3 * (y * W + x) + 1]!;
    let beside = 0;
    for (let y = 4; y < H - 4; y++) {
      expect(added(32, y), `the line at row ${y}`).toBe(0);
      beside += Math.abs(added(30, y)) + Math.abs(added(34, y));
    }
    // Beside the line, in the same band, the donors' grain.
    expect(beside / (2 * (H - 8))).toBeGreaterThan(1);
  });

  it("lays the footage's colour grain on the frame's 2x2 blocks, where the encoder keeps it", () => {
    // Colour noise on the frame's blocks (even pixels of the frame), the patch starting at odd ones.
    const x0 = 7, y0 = 3, sigma = 3;
    const target = face(4, 1), warped = face(0, 2), before = Float32Array.from(warped);
    const next = sequence(5);
    const blockNoise = new Map<string, number>();
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) {
        const key = `${(x0 + x) >> 1},${(y0 + y) >> 1}`;
        if (!blockNoise.has(key)) blockNoise.set(key, (next() * 2 - 1) * sigma * Math.sqrt(3));
        // Cr: red up, green down as the inverse transform has it.
        const cr = blockNoise.get(key)!, i = 3 * (y * W + x);
        target[i]! += 1.402 * cr;
        target[i + 1]! -= 0.714136 * cr;
      }
    }
    // Drawn on the right half only, and not skin in a band across it: colour grain too comes from skin
    // and lands only where the new face is drawn.
    const skin = allSkin(), drawn = allSkin();
    for (let i = 0; i < W * H; i++) if (i % W < W / 2) drawn[i] = skin[i] = 0;
    for (let y = 30; y < 36; y++) for (let x = 0; x < W; x++) skin[y * W + x] = 0;
    lay(warped, target, skin, drawn, x0, y0);
    for (let i = 0; i < W * H; i++) {
      if (i % W < W / 2) for (let c = 0; c < 3; c++) expect(warped[3 * i + c]).toBe(before[3 * i + c]);
    }
    const crAdded = (x: number, y: number) => {
      const i = 3 * (y * W + x);
      return 0.5 * (warped[i]! - before[i]!) - 0.418688 * (warped[i + 1]! - before[i + 1]!) - 0.081312 * (warped[i + 2]! - before[i + 2]!);
    };
    const added: number[] = [], noise: number[] = [];
    // Each of the frame's blocks inside the drawn half (the patch's first column and row are odd ones).
    for (let y = 1 + 2; y + 1 < H - 2; y += 2) {
      for (let x = W / 2 + 1 + 2; x + 1 < W - 2; x += 2) {
        expect(crAdded(x + 1, y + 1)).toBeCloseTo(crAdded(x, y), 3);
        // The band takes its donors' grain, not its own.
        if (y >= 26 && y < 40) continue;
        added.push(crAdded(x, y));
        noise.push(blockNoise.get(`${(x0 + x) >> 1},${(y0 + y) >> 1}`)!);
      }
    }
    expect(correlation(added, noise)).toBeGreaterThan(0.8);
  });

  it("leaves the face alone when the footage is grainy only off its skin", () => {
    const target = face(0, 1), warped = face(0, 2);
    const noisy = face(6, 3);
    for (let i = 0; i < W * H; i++) if (i % W < W / 2) for (let c = 0; c < 3; c++) target[3 * i + c] = noisy[3 * i + c]!;
    const skin = allSkin();
    for (let i = 0; i < W * H; i++) if (i % W < W / 2) skin[i] = 0;
    const before = Float32Array.from(warped);
    lay(warped, target, skin);
    expect(warped).toEqual(before);
  });

  it("fades the grain in above a level of 2, so footage near it does not switch it on and off", () => {
    const laid = (sigma: number) => {
      const target = face(sigma, 1), warped = face(0, 2), before = Float32Array.from(warped);
      lay(warped, target, allSkin());
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
