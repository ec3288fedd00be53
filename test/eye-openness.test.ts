import type { Human } from "@vladmandic/human";
import { beforeAll, describe, expect, it } from "vitest";
import { eyeOpenness, lidsLowered } from "../src/faceswap/render/eye-openness.js";
import { detectAfresh, loadHuman } from "../src/faceswap/render/human.js";
import { decodeFrames } from "../src/faceswap/render/images.js";
import { EYE_CORNERS } from "../src/faceswap/render/mesh.js";
import { samplePhoto } from "./support/footage.js";

let human: Human;

beforeAll(async () => {
  human = await loadHuman();
});

/** The faces of sample photo `n` at 576 px, as a render of it would see them, left to right, with how open their eyes read. */
async function readEyes(n: 1 | 2 | 3) {
  const { frames } = await decodeFrames(samplePhoto(n), { maxLongSide: 576, maxFrames: 1 });
  const frame = frames[0]!;
  const tensor = human.tf.tensor3d(frame.pixels, [frame.height, frame.width, 3], "float32");
  try {
    const faces = (await detectAfresh(human, tensor, { minConfidence: 0.3, describe: false })).sort((a, b) => a.box[0] - b.box[0]);
    const openness = await eyeOpenness(human, frame, faces.map((face) => face.mesh));
    return faces.map((face, i) => ({ x: Math.round(face.box[0]), openness: openness[i] }));
  } finally {
    human.tf.dispose(tensor);
  }
}

describe("eye openness", () => {
  it("reads lids lowered over eyes that look down, which the mesh model reads as open, and open eyes as open", async () => {
    // sample1: open eyes on the left, a face looking down in the middle, a laughing face narrowing its
    // eyes on the right; sample2: a face in profile, a bowed head and a face looking down; sample3:
    // three faces with their eyes open. The mesh model reads every one of these eyes open (0.26-0.35).
    const [pan, sofa, smile] = [await readEyes(1), await readEyes(2), await readEyes(3)];
    const report = JSON.stringify({ pan, sofa, smile });
    expect([pan.length, sofa.length, smile.length], report).toEqual([3, 3, 3]);
    for (const face of [pan[0]!, pan[1]!, sofa[1]!, sofa[2]!, ...smile]) expect(face.openness, report).not.toBeNull();
    for (const face of [pan[1]!, sofa[1]!, sofa[2]!]) expect(lidsLowered(face.openness!), report).toBeGreaterThanOrEqual(0.8);
    for (const face of [pan[0]!, ...smile]) expect(lidsLowered(face.openness!), report).toBe(0);
  });

  it("reads a face cut off by the frame's edge by the eye still in the frame", async () => {
    const { frames } = await decodeFrames(samplePhoto(2), { maxLongSide: 576, maxFrames: 1 });
    const frame = frames[0]!;
    const tensor = human.tf.tensor3d(frame.pixels, [frame.height, frame.width, 3], "float32");
    try {
      // sample2's right face, looking down.
      const faces = (await detectAfresh(human, tensor, { minConfidence: 0.3, describe: false })).sort((a, b) => a.box[0] - b.box[0]);
      const mesh = faces[2]!.mesh;
      // The frame cut through the middle of the eye on the image's left: that eye's crop leaves it.
      const [outer, inner] = EYE_CORNERS.map(([a, b]) => (mesh[a]![0] + mesh[b]![0]) / 2).sort((a, b) => a - b);
      const x0 = Math.round(outer!);
      expect(inner! - x0, "the other eye is well inside").toBeGreaterThan(20);
      const width = frame.width - x0;
      const pixels = new Uint8Array(width * frame.height * 3);
      for (let y = 0; y < frame.height; y++) pixels.set(frame.pixels.subarray((y * frame.width + x0) * 3, (y + 1) * frame.width * 3), y * width * 3);
      const cut = { pixels, width, height: frame.height };
      const shifted = mesh.map(([x, y, z]) => [x - x0, y, z] as [number, number, number]);
      const [openness] = await eyeOpenness(human, cut, [shifted]);
      expect(openness, "read by one eye").not.toBeNull();
      expect(lidsLowered(openness!)).toBeGreaterThanOrEqual(0.8);
    } finally {
      human.tf.dispose(tensor);
    }
  });
});
