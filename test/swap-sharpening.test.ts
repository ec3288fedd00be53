import { describe, expect, it } from "vitest";
import { matchedSharpening, sharpenLuma, STYLES } from "../src/faceswap/render/swap.js";

const SIZE = 96;

/** A grey patch with fine texture of `amplitude` levels (a fixed pseudo-random pattern per `seed`). */
function textured(amplitude: number, seed: number): Float32Array {
  const rgb = new Float32Array(SIZE * SIZE * 3);
  let state = seed;
  for (let i = 0; i < SIZE * SIZE; i++) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    const v = 140 + amplitude * (state / 2 ** 31 - 0.5);
    rgb.set([v * 1.1, v, v * 0.85], i * 3);
  }
  return rgb;
}

/** Energy of the finest band of luma (luma minus its 3x3 mean), away from the patch's border. */
function fineEnergy(rgb: Float32Array): number {
  const luma = (x: number, y: number) => 0.299 * rgb[(y * SIZE + x) * 3]! + 0.587 * rgb[(y * SIZE + x) * 3 + 1]! + 0.114 * rgb[(y * SIZE + x) * 3 + 2]!;
  let sum = 0;
  for (let y = 4; y < SIZE - 4; y++) {
    for (let x = 4; x < SIZE - 4; x++) {
      let mean = 0;
      for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) mean += luma(x + dx, y + dy) / 9;
      sum += (luma(x, y) - mean) ** 2;
    }
  }
  return sum;
}

/** The skin amount v2 picks for a photo with little texture over footage with `footage` levels of it, and the energy it leaves. */
function sharpenedOver(footage: number): { amount: number; gain: number } {
  const photo = textured(4, 7);
  const drawn = new Float32Array(SIZE * SIZE).fill(1), features = new Float32Array(SIZE * SIZE);
  const most = { skin: STYLES.v2.sharpen, features: STYLES.v2.sharpen };
  const amount = matchedSharpening(photo, textured(footage, 11), drawn, features, SIZE, SIZE, most, STYLES.v2.sharpenHeadroom);
  const before = fineEnergy(photo);
  sharpenLuma(photo, SIZE, SIZE, amount, features);
  return { amount: amount.skin, gain: fineEnergy(photo) / before };
}

describe("sharpening the new face's skin", () => {
  // Deeply creased footage once had the photo's young skin sharpened at the style's most on every
  // frame, its own texture multiplied eight times and more in energy: creases decades older than the
  // photo. However textured the footage, the photo's texture grows at most five times.
  it("follows textured footage only up to five times the photo's own texture", () => {
    const creased = sharpenedOver(60), deeper = sharpenedOver(200);
    // The amounts are tried in steps of 0.05, summed: the most comes out a hair under 2.8.
    expect(creased.amount).toBeLessThan(STYLES.v2.sharpen - 0.1);
    expect(deeper.amount).toBe(creased.amount);
    expect(creased.gain).toBeLessThan(5.5);
    expect(creased.gain).toBeGreaterThan(4);
  });

  // Over footage as finely textured as the photo, v2's skin keeps at most 1.5 times its energy (its
  // headroom over the footage).
  it("follows footage as smooth as the photo only up to the style's headroom", () => {
    const smooth = sharpenedOver(4);
    expect(smooth.amount).toBeLessThan(sharpenedOver(60).amount);
    expect(smooth.gain).toBeLessThan(STYLES.v2.sharpenHeadroom.skin * 1.05);
    expect(smooth.gain).toBeGreaterThan(1.2);
  });
});
