import { describe, expect, it } from "vitest";
import { facesBetween } from "../src/faceswap/render/faces-between.js";
import type { FaceData } from "../src/faceswap/render/protocol.js";

/** A face of 468 points spread over its box, each at `depth`. */
function face(x: number, y: number, size: number, depth = 0): FaceData {
  const mesh = new Float32Array(936), z = new Float32Array(468).fill(depth);
  for (let i = 0; i < 468; i++) {
    mesh[2 * i] = x + ((i * 7) % size);
    mesh[2 * i + 1] = y + ((i * 13) % size);
  }
  return { box: [x, y, size, size], score: 0.9, mesh, depth: z };
}

describe("faces between meshed frames", () => {
  it("puts each face that is in both frames the same share of the way from one to the other", () => {
    const [left, right] = [face(10, 10, 40), face(200, 20, 60, 4)];
    const [movedLeft, movedRight] = [face(16, 13, 40, 2), face(194, 20, 66, 8)];
    const between = facesBetween([left, right], [movedRight, movedLeft], 1 / 3);
    expect(between).toHaveLength(2);
    const [a, b] = between as [FaceData, FaceData];
    expect(a.box).toEqual([12, 11, 40, 40]);
    expect(a.mesh[0]).toBeCloseTo(left.mesh[0]! + 2, 5);
    expect(a.mesh[1]).toBeCloseTo(left.mesh[1]! + 1, 5);
    expect(a.depth[100]).toBeCloseTo(2 / 3, 5);
    expect(b.box).toEqual([198, 20, 62, 62]);
    expect(b.depth[0]).toBeCloseTo(4 + 4 / 3, 5);
    expect(b.score).toBe(0.9);
  });

  it("draws a face of one frame only (it came in or left) on the frames nearer that one", () => {
    const staying = [face(10, 10, 40), face(12, 10, 40)];
    const leaving = face(300, 10, 40), coming = face(100, 200, 40);
    expect(facesBetween([staying[0]!, leaving], [staying[1]!, coming], 0.25).map((f) => f.box[0])).toEqual([10.5, 300]);
    expect(facesBetween([staying[0]!, leaving], [staying[1]!, coming], 0.75).map((f) => f.box[0])).toEqual([11.5, 100]);
  });

  it("pairs each face once, with the one its box overlaps most", () => {
    const a = face(0, 0, 50), b = face(30, 0, 50);
    const nearB = face(28, 0, 50), nearA = face(3, 0, 50);
    const between = facesBetween([a, b], [nearB, nearA], 0.5);
    expect(between.map((f) => f.box[0])).toEqual([1.5, 29]);
  });
});
