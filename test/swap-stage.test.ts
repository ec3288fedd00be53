import { describe, expect, it } from "vitest";
import type { FaceData } from "../src/faceswap/render/protocol.js";
import { lasting } from "../src/faceswap/render/swap-stage.js";
import { FaceTracker } from "../src/faceswap/render/tracker.js";

/** A face of 468 points spread over a 40-pixel box at (x, y). */
function face(x: number, y: number): FaceData {
  const mesh = new Float32Array(936);
  for (let i = 0; i < 468; i++) {
    mesh[2 * i] = x + ((i * 7) % 40);
    mesh[2 * i + 1] = y + ((i * 13) % 40);
  }
  return { box: [x, y, 40, 40], score: 0.9, mesh, depth: new Float32Array(468) };
}

describe("faces drawn", () => {
  it("draws a face from its first frame when the next frame has it too, and never one seen on a single frame", () => {
    const tracker = new FaceTracker(25);
    // Frame 0: a face that stays and one the detector finds on this frame alone.
    const [staying, flash] = tracker.update(0, [face(10, 10), face(200, 10)]);
    const next = [face(12, 10)];
    expect(lasting(staying!, 0, next)).toBe(true);
    expect(lasting(flash!, 0, next)).toBe(false);
    // Frame 1: the staying face has been seen before; a face found again after a gap starts a new run.
    const [again] = tracker.update(1, [face(12, 10)]);
    expect(again).toBe(staying);
    expect(lasting(again!, 1, [])).toBe(true);
    const [back] = tracker.update(3, [face(200, 10)]);
    expect(back).toBe(flash);
    expect(lasting(back!, 3, [])).toBe(false);
    expect(lasting(back!, 3, [face(201, 11)])).toBe(true);
    // Past the last frame nothing tells: it is drawn.
    expect(lasting(back!, 3, null)).toBe(true);
  });
});
