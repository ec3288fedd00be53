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
  it("draws a face from its first frame when its run lasts the shortest run, and never one seen on fewer frames", () => {
    const minRun = 3;
    const tracker = new FaceTracker(10);
    // Frame 0: a face that stays, one the detector finds on this frame alone, and one on two frames.
    const [staying, flash, brief] = tracker.update(0, [face(10, 10), face(200, 10), face(400, 10)]);
    const upcoming = [[face(12, 10), face(401, 10)], [face(14, 10)]];
    expect(lasting(staying!, 0, upcoming, minRun)).toBe(true);
    expect(lasting(flash!, 0, upcoming, minRun)).toBe(false);
    expect(lasting(brief!, 0, upcoming, minRun)).toBe(false);
    // A face moving on is followed from frame to frame: by frame 2 it no longer overlaps where it began.
    const drifting = [[face(24, 10)], [face(38, 10)]];
    expect(lasting(staying!, 0, drifting, minRun)).toBe(true);
    // Frame 1: the brief face's run ends on this frame, two frames long.
    const [again, briefAgain] = tracker.update(1, [face(12, 10), face(401, 10)]);
    expect(again).toBe(staying);
    expect(briefAgain).toBe(brief);
    expect(lasting(briefAgain!, 1, [[face(14, 10)], []], minRun)).toBe(false);
    // Frame 2: the staying face's run is long enough whatever comes next.
    const [still] = tracker.update(2, [face(14, 10)]);
    expect(lasting(still!, 2, [[], []], minRun)).toBe(true);
    // A face found again after a gap starts a new run.
    const [back] = tracker.update(4, [face(200, 10)]);
    expect(back).toBe(flash);
    expect(lasting(back!, 4, [[face(201, 11)], []], minRun)).toBe(false);
    expect(lasting(back!, 4, [[face(201, 11)], [face(202, 11)]], minRun)).toBe(true);
    // Past the last frame nothing tells: a face seen up to it is drawn.
    expect(lasting(back!, 4, [[face(201, 11)], null], minRun)).toBe(true);
    expect(lasting(back!, 4, [null, null], minRun)).toBe(true);
  });
});
