import { describe, expect, it } from "vitest";
import { motionShares, motionSignature } from "../src/faceswap/render/frame-motion.js";

const WIDTH = 576, HEIGHT = 384;

/** An rgb24 frame of smooth texture, moved `shift` pixels right, with `noise` (0-255) added per pixel. */
function frame(shift: number, noise = 0, seed = 1): Uint8Array {
  const pixels = new Uint8Array(WIDTH * HEIGHT * 3);
  let state = seed;
  const random = () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31 - 0.5) * noise;
  for (let y = 0; y < HEIGHT; y++) {
    for (let x = 0; x < WIDTH; x++) {
      const u = x - shift;
      const value = 128 + 50 * Math.sin(u / 9) * Math.cos(y / 13) + 30 * Math.sin((u + y) / 23);
      for (let c = 0; c < 3; c++) pixels[(y * WIDTH + x) * 3 + c] = Math.round(value + random());
    }
  }
  return pixels;
}

const signature = (pixels: Uint8Array) => motionSignature(pixels, WIDTH, HEIGHT);

describe("frames between meshed frames, timed by motion", () => {
  it("puts a repeated frame where the one it repeats is, and frames of an even pan evenly", () => {
    const repeated = motionShares([frame(0), frame(3), frame(3), frame(6)].map(signature));
    expect(repeated[0]).toBe(0);
    expect(repeated[1]).toBeCloseTo(0.5, 1);
    expect(repeated[2]).toBeCloseTo(repeated[1]!, 5);
    expect(repeated[3]).toBe(1);
    const even = motionShares([frame(0), frame(2), frame(4), frame(6)].map(signature));
    expect(even[1]).toBeCloseTo(1 / 3, 1);
    expect(even[2]).toBeCloseTo(2 / 3, 1);
    // A fast step after a slow one: most of the way is covered by the fast step.
    const uneven = motionShares([frame(0), frame(1), frame(6)].map(signature));
    expect(uneven[1]).toBeLessThan(0.3);
  });

  it("times a still picture evenly, and one with sensor noise about evenly", () => {
    expect(motionShares([frame(0), frame(0), frame(0), frame(0)].map(signature))).toEqual([0, 1 / 3, 2 / 3, 1]);
    // The noise changes every block a little on every step, alike.
    const shares = motionShares([1, 2, 3, 4].map((seed) => signature(frame(0, 12, seed))));
    shares.forEach((share, k) => expect(Math.abs(share - k / 3), `frame ${k}: ${share}`).toBeLessThan(0.1));
  });
});
